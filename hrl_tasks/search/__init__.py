"""Hyper-parameter search, decided without a cluster: spaces, samplers, trial schedulers.

A search space is a dict of config keys to domains (or constants); a sampler
proposes each trial's config from it; a trial scheduler decides, from each
result a trial reports, whether it continues, stops or exploits another (each
writes its state as plain JSON values, `hrl_tasks.search.state`)::

    from hrl_tasks.search import ASHAScheduler, loguniform, make_sampler, uniform

    space = {"lr": loguniform(1e-4, 1e-2), "gamma": uniform(0.95, 0.999)}
    sampler = make_sampler("random", space, num_samples=8, seed=0)
    scheduler = ASHAScheduler(max_t=100, grace_period=4, mode="max")

Nothing here imports torch or distributed; Optuna is imported only by its sampler.
"""

from hrl_tasks.search.samplers import (
    SAMPLERS,
    GridSampler,
    OptunaSampler,
    RandomSampler,
    Sampler,
    grid_points,
    make_sampler,
    sampler_from_state,
)
from hrl_tasks.search.schedulers import (
    CONTINUE,
    STOP,
    ASHAScheduler,
    Decision,
    Exploit,
    FIFOScheduler,
    PBTScheduler,
    TrialScheduler,
    bottom_and_top,
    perturb,
    rung_iterations,
    scheduler_from_state,
)
from hrl_tasks.search.space import (
    ACCEPTED_FORMS,
    Domain,
    Mode,
    SearchError,
    choice,
    grid,
    is_domain,
    loguniform,
    parse_space_item,
    randint,
    sample_config,
    uniform,
)

__all__ = [
    "ACCEPTED_FORMS",
    "ASHAScheduler",
    "CONTINUE",
    "Decision",
    "Domain",
    "Exploit",
    "FIFOScheduler",
    "GridSampler",
    "Mode",
    "OptunaSampler",
    "PBTScheduler",
    "RandomSampler",
    "SAMPLERS",
    "STOP",
    "Sampler",
    "SearchError",
    "TrialScheduler",
    "bottom_and_top",
    "choice",
    "grid",
    "grid_points",
    "is_domain",
    "loguniform",
    "make_sampler",
    "parse_space_item",
    "perturb",
    "randint",
    "rung_iterations",
    "sample_config",
    "sampler_from_state",
    "scheduler_from_state",
    "uniform",
]
