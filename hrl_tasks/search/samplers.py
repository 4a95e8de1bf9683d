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
"""

from __future__ import annotations

import itertools
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping
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

    @abstractmethod
    def suggest(self, trial_id: Hashable) -> dict | None:
        """The config of a new trial called ``trial_id``, or None when all were proposed."""

    def observe(self, trial_id: Hashable, config: dict, value: float | None) -> None:
        """The metric a finished trial reached (None or NaN if it failed).

        Samplers that do not learn ignore it.
        """
        return None


class RandomSampler(Sampler):
    """Every combination of the `grid` keys crossed with random draws of the others,
    ``num_samples`` times. Deterministic given ``seed`` and the order of calls."""

    def __init__(self, space: Mapping[str, Any], num_samples: int, seed: int | None = None):
        self._space = dict(space)
        self._rng = np.random.default_rng(seed)
        points = grid_points(self._space)
        self.num_trials = num_samples * len(points)
        self._points: Iterator[dict] = itertools.chain.from_iterable(
            itertools.repeat(points, num_samples)
        )

    def suggest(self, trial_id: Hashable) -> dict | None:
        """The next grid point with the other keys drawn at random; None after the last."""
        point = next(self._points, None)
        if point is None:
            return None
        return {key: _draw(key, value, point, self._rng) for key, value in self._space.items()}


def _draw(key: str, value: Any, point: Mapping[str, Any], rng: np.random.Generator) -> Any:
    if key in point:
        return point[key]
    return value.sample(rng) if is_domain(value) else value


class GridSampler(RandomSampler):
    """Every combination of the `grid` and `choice` keys, ``num_samples`` times.

    Raises:
        SearchError: if the space has a uniform, loguniform or randint key.
    """

    def __init__(self, space: Mapping[str, Any], num_samples: int = 1, seed: int | None = None):
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

    Domains map to Optuna's: `uniform` and `loguniform` to ``suggest_float`` (with
    ``log=True``), `randint` to ``suggest_int`` (whose high is included, so
    ``high - 1``), `choice` to ``suggest_categorical``. Constants pass through.

    Raises:
        ImportError: if Optuna is not installed, saying how to install it.
        SearchError: for a `grid` key (TPE does not enumerate; use `choice`).
    """

    def __init__(
        self,
        space: Mapping[str, Any],
        num_samples: int,
        metric: str,
        mode: Mode = "max",
        seed: int | None = None,
    ):
        optuna = import_optuna()
        grids = [key for key, value in space.items() if isinstance(value, grid)]
        if grids:
            raise SearchError(
                f"the optuna sampler does not enumerate grid keys ({', '.join(grids)}): "
                f"write choice([...]) for them, or use the random or grid sampler"
            )
        self._space = dict(space)
        self._failed = optuna.trial.TrialState.FAIL
        self.metric = metric
        self.num_trials = num_samples
        self._study = optuna.create_study(
            direction="maximize" if mode == "max" else "minimize",
            sampler=optuna.samplers.TPESampler(seed=seed),
        )
        self._pending: dict[Hashable, Any] = {}
        self._asked = 0

    def suggest(self, trial_id: Hashable) -> dict | None:
        """The config TPE proposes next, or None after ``num_samples`` proposals."""
        if self._asked >= self.num_trials:
            return None
        if trial_id in self._pending:
            raise SearchError(f"trial {trial_id!r} was already suggested and not yet observed")
        trial = self._study.ask()
        self._asked += 1
        self._pending[trial_id] = trial
        return {key: optuna_suggest(trial, key, value) for key, value in self._space.items()}

    def observe(self, trial_id: Hashable, config: dict, value: float | None) -> None:
        """Tell Optuna the trial's metric; None or NaN marks it failed."""
        try:
            trial = self._pending.pop(trial_id)
        except KeyError:
            raise SearchError(f"trial {trial_id!r} was not suggested by this sampler") from None
        if value is None or math.isnan(value):
            self._study.tell(trial, state=self._failed)
        else:
            self._study.tell(trial, float(value))


def optuna_suggest(trial: Any, key: str, value: Any) -> Any:
    """The value Optuna's ``trial`` suggests for ``key`` from domain ``value``."""
    if isinstance(value, uniform):
        return trial.suggest_float(key, value.low, value.high)
    if isinstance(value, loguniform):
        return trial.suggest_float(key, value.low, value.high, log=True)
    if isinstance(value, randint):
        return trial.suggest_int(key, value.low, value.high - 1)
    if isinstance(value, choice):
        if all(v is None or isinstance(v, (bool, int, float, str)) for v in value.values):
            return trial.suggest_categorical(key, list(value.values))
        # Optuna stores only plain values: choose among the positions of other ones.
        return value.values[trial.suggest_categorical(key, list(range(len(value.values))))]
    return value


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
