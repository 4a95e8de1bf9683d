"""Samplers: the config of each next trial, drawn from a search space.

A sampler proposes configs until it has proposed its ``num_trials``; a sampler
that learns (Optuna's TPE) is told each finished trial's metric::

    sampler = make_sampler("random", space, num_samples=4, seed=0)
    while (config := sampler.suggest(trial_id)) is not None:
        value = run_trial(config)[metric]  # None if the trial failed
        sampler.observe(trial_id, config, value)

The three samplers:

- ``"random"``: every combination of the `grid` keys, each crossed with random
  draws of the other keys, and all that ``num_samples`` times, as Ray Tune's
  ``num_samples`` with ``grid_search`` does: ``num_samples * grid size`` trials.
- ``"grid"``: every combination of the `grid` and `choice` keys (``num_samples``
  times); any other domain is an error, since it has no finite list of values.
- ``"optuna"``: TPE through Optuna's ask-and-tell interface, for ``num_samples``
  trials; Optuna is imported only here (``pip install optuna``).

Each sampler writes its state as plain JSON values (``sampler.to_state()``), and
`sampler_from_state` builds one that proposes what it would have proposed next: a
search's state file holds it (`hrl_tasks.search.state`).
"""

from __future__ import annotations

import itertools
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from hrl_tasks.search.space import (
    Mode,
    SearchError,
    check_mode,
    choice,
    grid,
    is_domain,
    loguniform,
    randint,
    uniform,
)
from hrl_tasks.search.state import (
    from_json,
    restored,
    rng_from_json,
    rng_to_json,
    space_from_state,
    space_to_state,
    to_json,
)

SAMPLERS = ("random", "grid", "optuna")
"""The names `make_sampler` accepts."""


class Sampler(ABC):
    """Proposes the config of each next trial; learns from finished ones if it can.

    Usage::

        while (config := sampler.suggest(trial_id)) is not None:
            ...  # run the trial
            sampler.observe(trial_id, config, value)
    """

    num_trials: int
    """How many configs `suggest` proposes in all."""
    kind: str | None = None
    """The name its state is saved under (`sampler_from_state`); None for a class
    of another package, which is not saved."""

    @abstractmethod
    def suggest(self, trial_id: Hashable) -> dict | None:
        """The config of a new trial called ``trial_id``, or None when all were proposed."""

    def observe(self, trial_id: Hashable, config: dict, value: float | None) -> None:
        """The metric a finished trial reached (None or NaN if it failed).

        Samplers that do not learn ignore it.
        """
        return None

    def to_state(self) -> dict:
        """What `sampler_from_state` rebuilds this sampler from, as plain JSON values.

        A class that is not one of `SAMPLERS` is named, not saved: a search with it
        writes its outputs but cannot resume.
        """
        return {"kind": None, "class": f"{type(self).__module__}.{type(self).__qualname__}"}


class RandomSampler(Sampler):
    """Every combination of the `grid` keys crossed with random draws of the others,
    ``num_samples`` times. Deterministic given ``seed`` and the order of calls.

    State: the space, ``num_samples``, how many configs it proposed, and its random
    generator (``seed`` may be a numpy ``Generator`` to draw from, as `from_state` passes).
    """

    kind = "random"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        seed: int | np.random.Generator | None = None,
    ):
        self._space = dict(space)
        self._rng = np.random.default_rng(seed)
        self._points = grid_points(self._space)
        self.num_samples = num_samples
        self.num_trials = num_samples * len(self._points)
        self.proposed = 0
        """How many configs it proposed so far."""

    def suggest(self, trial_id: Hashable) -> dict | None:
        """The next grid point with the other keys drawn at random; None after the last."""
        if self.proposed >= self.num_trials:
            return None
        point = self._points[self.proposed % len(self._points)]
        self.proposed += 1
        return {key: _draw(key, value, point, self._rng) for key, value in self._space.items()}

    def to_state(self) -> dict:
        """The space, ``num_samples``, the count proposed and the generator, as JSON values."""
        return {
            "kind": self.kind,
            "space": space_to_state(self._space),
            "num_samples": self.num_samples,
            "proposed": self.proposed,
            "rng": rng_to_json(self._rng),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RandomSampler:
        """The sampler `to_state` described, about to propose what it would have next."""
        space, rng = space_from_state(state["space"]), rng_from_json(state["rng"])
        sampler = cls(space, int(state["num_samples"]), seed=rng)
        sampler.proposed = int(state["proposed"])
        return sampler


def _draw(key: str, value: Any, point: Mapping[str, Any], rng: np.random.Generator) -> Any:
    if key in point:
        return point[key]
    return value.sample(rng) if is_domain(value) else value


class GridSampler(RandomSampler):
    """Every combination of the `grid` and `choice` keys, ``num_samples`` times.

    Raises:
        SearchError: if the space has a uniform, loguniform or randint key.
    """

    kind = "grid"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int = 1,
        seed: int | np.random.Generator | None = None,
    ):
        continuous = [
            f"{key}={value!r}"
            for key, value in space.items()
            if is_domain(value) and not isinstance(value, (grid, choice))
        ]
        if continuous:
            raise SearchError(
                f"the grid sampler enumerates grid([...]) and choice([...]) keys only, not "
                f"{', '.join(continuous)}: use the random or optuna sampler, or list the "
                f"values with grid([...])"
            )
        as_grid = {k: grid(v.values) if isinstance(v, choice) else v for k, v in space.items()}
        super().__init__(as_grid, num_samples, seed)


def grid_points(space: Mapping[str, Any]) -> list[dict]:
    """Every combination of the `grid` keys' values, the last key varying fastest;
    ``[{}]`` when there is no grid key."""
    keys = [key for key, value in space.items() if isinstance(value, grid)]
    combinations = itertools.product(*(space[key].values for key in keys))
    return [dict(zip(keys, values, strict=True)) for values in combinations]


class OptunaSampler(Sampler):
    """Optuna's TPE (Bergstra et al. 2011) through ``study.ask()`` and ``study.tell()``.

    Domains map to Optuna's distributions (`optuna_distributions`). Each proposal is
    asked of a TPE sampler seeded from this sampler's own generator, so that what it
    proposes next follows from the trials told and that generator alone.

    State: the space, ``num_samples``, the metric and mode, the generator, every trial
    asked (its params, and its value, or that it failed or is still running), and which
    trial id each running one has.

    Raises:
        ImportError: if Optuna is not installed, saying how to install it.
        SearchError: for a `grid` key (TPE does not enumerate; use `choice`).
    """

    kind = "optuna"

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: Mode = "max",
        seed: int | np.random.Generator | None = None,
    ):
        optuna = import_optuna()
        grids = [key for key, value in space.items() if isinstance(value, grid)]
        if grids:
            raise SearchError(
                f"the optuna sampler does not enumerate grid keys ({', '.join(grids)}): "
                f"write choice([...]) for them, or use the random or grid sampler"
            )
        self._space = dict(space)
        self._distributions = optuna_distributions(self._space)
        self.metric, self.mode = metric, check_mode(mode)
        self.num_trials = num_samples
        self._rng = np.random.default_rng(seed)
        # Each ask gets a TPE sampler of its own (`suggest`): none is given here.
        self._study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
        self._pending: dict[Hashable, int] = {}  # trial id -> Optuna's trial number

    def suggest(self, trial_id: Hashable) -> dict | None:
        """The config TPE proposes next, or None after ``num_samples`` proposals."""
        if len(self._study.get_trials(deepcopy=False)) >= self.num_trials:
            return None
        if trial_id in self._pending:
            raise SearchError(f"trial {trial_id!r} was already suggested and not yet observed")
        seed = int(self._rng.integers(2**32))
        self._study.sampler = import_optuna().samplers.TPESampler(seed=seed)
        trial = self._study.ask(self._distributions)
        self._pending[trial_id] = trial.number
        return optuna_config(self._space, trial.params)

    def observe(self, trial_id: Hashable, config: dict, value: float | None) -> None:
        """Tell Optuna the trial's metric; None or NaN marks it failed."""
        try:
            number = self._pending.pop(trial_id)
        except KeyError:
            raise SearchError(f"trial {trial_id!r} was not suggested by this sampler") from None
        if value is None or math.isnan(value):
            self._study.tell(number, state=import_optuna().trial.TrialState.FAIL)
        else:
            self._study.tell(number, float(value))

    def to_state(self) -> dict:
        """The space, ``num_samples``, metric, mode, generator and trials, as JSON values."""
        trials = [
            {"params": to_json(t.params), "state": t.state.name, "value": t.value}
            for t in self._study.get_trials(deepcopy=False)
        ]
        return {
            "kind": self.kind,
            "space": space_to_state(self._space),
            "num_samples": self.num_trials,
            "metric": self.metric,
            "mode": self.mode,
            "rng": rng_to_json(self._rng),
            "trials": trials,
            "pending": [[to_json(trial_id), number] for trial_id, number in self._pending.items()],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> OptunaSampler:
        """The sampler `to_state` described: a study with its trials added again (those
        still running too, to be told later), and its generator where it was.

        Raises:
            SearchError: for a trial state other than complete, failed or running.
        """
        space, rng = space_from_state(state["space"]), rng_from_json(state["rng"])
        sampler = cls(space, int(state["num_samples"]), state["metric"], state["mode"], rng)
        for trial in state["trials"]:
            sampler._study.add_trial(optuna_trial(trial, sampler._distributions))
        sampler._pending = {from_json(trial_id): int(n) for trial_id, n in state["pending"]}
        return sampler


def optuna_trial(trial: Mapping[str, Any], distributions: Mapping[str, Any]) -> Any:
    """The Optuna trial that `OptunaSampler.to_state` wrote as ``trial``, to add to a study.

    Raises:
        SearchError: for a state other than complete, failed or running.
    """
    optuna = import_optuna()
    if trial["state"] not in ("COMPLETE", "FAIL", "RUNNING"):
        raise SearchError(f"an Optuna trial in state {trial['state']!r} in a search's state")
    return optuna.trial.create_trial(
        params=from_json(trial["params"]),
        distributions=dict(distributions),
        value=trial["value"],
        state=optuna.trial.TrialState[trial["state"]],
    )


def optuna_distributions(space: Mapping[str, Any]) -> dict:
    """Optuna's distribution of each domain of ``space`` (constants have none): `uniform`
    and `loguniform` a ``FloatDistribution`` (with ``log=True``), `randint` an
    ``IntDistribution`` (whose high is included, so ``high - 1``), `choice` a
    ``CategoricalDistribution`` of its values, or of their positions when they are not
    plain values (Optuna stores only None, bools, numbers and strings)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    distributions = {}
    for key, value in space.items():
        if isinstance(value, (uniform, loguniform)):
            log = isinstance(value, loguniform)
            distributions[key] = FloatDistribution(value.low, value.high, log=log)
        elif isinstance(value, randint):
            distributions[key] = IntDistribution(value.low, value.high - 1)
        elif isinstance(value, choice):
            plain = all(_is_plain(v) for v in value.values)
            choices = value.values if plain else range(len(value.values))
            distributions[key] = CategoricalDistribution(list(choices))
    return distributions


def optuna_config(space: Mapping[str, Any], params: Mapping[str, Any]) -> dict:
    """The config of an Optuna trial's ``params`` (`optuna_distributions` of ``space``):
    a choice of values that are not plain is the value at the position chosen;
    constants are as they are."""
    config = {}
    for key, value in space.items():
        if key not in params:
            config[key] = value
        elif isinstance(value, choice) and not all(_is_plain(v) for v in value.values):
            config[key] = value.values[params[key]]
        else:
            config[key] = params[key]
    return config


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def import_optuna():
    """The ``optuna`` module.

    Raises:
        ImportError: if it is not installed, saying ``pip install optuna``.
    """
    try:
        import optuna
    except ImportError:
        raise ImportError(
            "the optuna sampler needs Optuna, which is not installed: pip install optuna"
        ) from None
    return optuna


def make_sampler(
    name: str,
    space: Mapping[str, Any],
    num_samples: int,
    seed: int | None = None,
    metric: str | None = None,
    mode: Mode = "max",
) -> Sampler:
    """The sampler called ``name`` over ``space``.

    Args:
        name: ``"random"``, ``"grid"`` or ``"optuna"`` (see the module docstring).
        space: config keys to domains (`uniform`, ...) or constants.
        num_samples: how many times the grid is repeated (random, grid) or how
            many trials TPE proposes (optuna).
        seed: makes the proposals repeatable; None draws a fresh seed.
        metric: the metric whose values `Sampler.observe` receives; optuna needs it.
        mode: ``"max"`` if larger values of ``metric`` are better, ``"min"`` if smaller.

    Raises:
        SearchError: for an unknown name, ``num_samples < 1``, a bad mode, a
            space the sampler cannot draw from, or optuna without a metric.
        ImportError: for ``"optuna"`` when Optuna is not installed.
    """
    if not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool):
        raise SearchError(f"num_samples must be an int, got {num_samples!r}")
    if num_samples < 1:
        raise SearchError(f"num_samples must be at least 1, got {num_samples}")
    check_mode(mode)
    if name == "random":
        return RandomSampler(space, int(num_samples), seed)
    if name == "grid":
        return GridSampler(space, int(num_samples), seed)
    if name == "optuna":
        if metric is None:
            raise SearchError(
                "the optuna sampler learns from a metric: pass metric (e.g. "
                "'episode_return_mean') and mode ('max' or 'min')"
            )
        return OptunaSampler(space, int(num_samples), metric, mode, seed)
    raise SearchError(f"unknown sampler {name!r}; available: {', '.join(SAMPLERS)}")


def sampler_from_state(state: Mapping[str, Any]) -> Sampler:
    """The sampler whose ``to_state()`` is ``state``, about to propose what it would have.

    Raises:
        SearchError: for a sampler of a class that was named, not saved, or an unknown kind.
    """
    return restored(state, (RandomSampler, GridSampler, OptunaSampler), "sampler")
