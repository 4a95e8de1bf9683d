"""What `hrl_tasks.tune` takes besides the algorithm, the env, the space and the config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hrl_tasks.search.schedulers import TrialScheduler
from hrl_tasks.search.space import Mode


@dataclass(frozen=True)
class TuneOptions:
    """How a search runs: its trials, its decisions, where it writes and what it shows."""

    num_samples: int = 8
    """Trials proposed (for ``grid``: repeats of the grid)."""
    scheduler: str | TrialScheduler = "fifo"
    """``"fifo"``, ``"asha"`` or ``"pbt"`` (see `make_scheduler` for their defaults), or a
    `TrialScheduler`."""
    sampler: str = "random"
    """``"random"``, ``"grid"``, or ``"optuna"`` (TPE; needs Optuna)."""
    metric: str = "episode_return_mean"
    """The reported metric the search optimizes."""
    mode: Mode = "max"
    """``"max"`` or ``"min"``: which way ``metric`` is better."""
    stop: Mapping[str, Any] | None = None
    """Each trial's stop conditions, as in `hrl_tasks.train` (default 10 iterations; on
    ``resume``, those of the search saved)."""
    trial_resources: Mapping[str, float] | None = None
    """What each trial's own task holds (default ``{"CPU": 1}``); its rollout workers hold
    the config's ``rollout_worker_resources``."""
    max_concurrent: int | None = None
    """At most this many trials at once (default: as many as fit)."""
    out: str | Path | None = None
    """Directory for each trial's metrics.jsonl and checkpoints, trials.json, results.csv
    and curves.png, and TensorBoard runs (one per trial, in ``tensorboard/``) when
    tensorboard is installed; None writes nothing."""
    resume: bool = False
    """Continue the search saved in ``out``: ended trials are not run again."""
    force: bool = False
    """If ``out`` holds another run's files (and ``resume`` is not set), move them aside
    to ``<out>.old-<time>`` instead of refusing."""
    seed: int | None = 0
    """Makes the sampler and PBT repeatable."""
    checkpoint_interval_s: float = 60.0
    """Longest stretch a trial trains between two saves."""
    max_failures: int = 2
    """A trial that fails more often than this ends with ERROR."""
    reporter: Callable[[Any], None] | None = None
    """Called with the `Search` after each wait, besides the table."""
    verbose: bool = True
    """Show the live table of trials (`hrl_tasks.tuning.report.TrialTable`): printed, or
    updated in place in a notebook."""

    @classmethod
    def from_keywords(cls, options: Mapping[str, Any]) -> TuneOptions:
        """The options of ``tune(**options)``.

        Raises:
            TypeError: for a name that is not an option, listing those that are.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(
                f"tune() got unexpected keyword arguments {unknown}; "
                f"its options: {', '.join(names)}"
            )
        return cls(**options)
