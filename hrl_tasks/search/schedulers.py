"""Trial schedulers: from each result a trial reports, whether it continues, stops,
or takes over another trial's checkpoint. Pure decisions: no cluster, no threads,
no I/O; the caller runs the trials and carries the decisions out::

    scheduler.on_trial_add(trial_id, config)
    for iteration, value in results_of(trial_id):  # value: the metric, e.g. a return
        decision = scheduler.on_result(trial_id, iteration, value)
        if decision == STOP:
            break
        if isinstance(decision, Exploit):  # PBT: restore decision.source's latest
            ...                            # checkpoint, continue with decision.config
        if saved_a_checkpoint:
            scheduler.on_checkpoint(trial_id)
    scheduler.on_trial_complete(trial_id)

- `FIFOScheduler` never stops a trial.
- `ASHAScheduler` stops trials that fall out of the top ``1 / reduction_factor``
  at a rung (asynchronous successive halving).
- `PBTScheduler` has trials at the bottom of the population copy trials at the
  top and perturb their hyper-parameters (population based training).

Each writes its state as plain JSON values (``scheduler.to_state()``), and
`scheduler_from_state` builds one that decides as it would have: a search's state
file holds it (`hrl_tasks.search.state`).
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from hrl_tasks.search.space import (
    Mode,
    SearchError,
    check_mode,
    choice,
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

CONTINUE = "continue"
"""The decision that a trial goes on training."""
STOP = "stop"
"""The decision that a trial ends now."""


@dataclass(frozen=True)
class Exploit:
    """The decision that a trial takes over another's state: restore the latest
    checkpoint of trial ``source`` into it, then continue it with ``config``."""

    source: Hashable
    config: dict


Decision = Literal["continue", "stop"] | Exploit
"""What `TrialScheduler.on_result` returns."""


class TrialScheduler(ABC):
    """Decides, from each reported result, what becomes of a trial.

    Usage::

        scheduler.on_trial_add(trial_id, config)
        decision = scheduler.on_result(trial_id, iteration, value)  # after each iteration
        scheduler.on_checkpoint(trial_id)                            # after each save
        scheduler.on_trial_complete(trial_id)                        # when it ends

    ``iteration`` is the trial's progress in whatever unit the caller counts: `tune`
    passes training iterations, or env steps when its only budget is ``--stop-steps``
    (``max_t``, grace periods and intervals are then in env steps too).

    A scheduler's state is saved with `to_state` and read back with `from_state`
    (`scheduler_from_state`); a subclass that keeps more state overrides both.
    """

    kind: str | None = None
    """The name its state is saved under (`scheduler_from_state`); None for a class of
    another package, which is not saved."""

    def on_trial_add(self, trial_id: Hashable, config: Mapping[str, Any]) -> None:
        """A trial starts with ``config``."""
        return None

    @abstractmethod
    def on_result(self, trial_id: Hashable, iteration: int, value: float) -> Decision:
        """The trial reached ``value`` of the metric after ``iteration`` iterations.

        Returns:
            ``"continue"``, ``"stop"``, or an `Exploit` to carry out before continuing.
        """

    def on_checkpoint(self, trial_id: Hashable) -> None:
        """The caller saved the trial's state, with its current config."""
        return None

    def on_trial_complete(self, trial_id: Hashable) -> None:
        """The trial ended (stopped, finished or failed); it is no longer considered."""
        return None

    def on_trial_restore(self, trial_id: Hashable, iteration: int) -> None:
        """The trial now continues from a state at ``iteration`` (another trial's, after
        an `Exploit`)."""
        return None

    def next_decision(self, trial_id: Hashable, iteration: int) -> int | None:
        """The next iteration after ``iteration`` whose result may change what becomes
        of the trial (`on_result` returns ``"continue"`` for every one before it), or
        None if none will. A runner can train a trial that far without asking."""
        return None

    def to_state(self) -> dict:
        """What `scheduler_from_state` rebuilds this scheduler from, as plain JSON values.

        A class that is not one of this module's is named, not saved: a search with it
        writes its outputs but cannot resume.
        """
        return {"kind": None, "class": f"{type(self).__module__}.{type(self).__qualname__}"}


class FIFOScheduler(TrialScheduler):
    """Never stops a trial: each runs until the search's own stop condition."""

    kind = "fifo"

    def on_result(self, trial_id: Hashable, iteration: int, value: float) -> Decision:
        """Always ``"continue"``."""
        return CONTINUE

    def to_state(self) -> dict:
        """Its kind alone: it keeps nothing."""
        return {"kind": self.kind}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FIFOScheduler:
        return cls()


def _score(value: float, mode: Mode) -> float:
    """Larger is better: ``value`` for mode max, ``-value`` for min; NaN is the worst."""
    if math.isnan(value):
        return -math.inf
    return value if mode == "max" else -value


def _positive_int(owner: str, name: str, value: Any) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise SearchError(f"{owner} needs a whole number >= 1 for {name}, got {value!r}")
    return int(value)


class ASHAScheduler(TrialScheduler):
    """Asynchronous successive halving: Li et al. 2020, "A System for Massively
    Parallel Hyperparameter Tuning", https://arxiv.org/abs/1810.05934.

    State: the rungs, at ``grace_period * reduction_factor**k`` iterations up to
    ``max_t``, and at each rung the value every trial had when it got there.

    Policy: a trial's first result at or past a rung is judged there, once (at
    the highest rung reached, if a report skips some). Its value is recorded,
    and it continues only if it is in the top ``1 / reduction_factor`` of the
    ``n`` values recorded at that rung so far, its own included: fewer than
    ``max(1, n // reduction_factor)`` of them are strictly better (so the best
    so far always continues and the first trial at a rung is never stopped;
    ties are kept). A NaN value stops the trial and counts as the worst. Every trial stops at ``max_t`` iterations. As in Ray
    Tune's ``ASHAScheduler`` with one bracket, a stopped trial is not resumed
    later (the paper's promotions need paused trials).

    Raises:
        SearchError: for ``grace_period``, ``max_t`` or ``reduction_factor``
            below their minimum (1, ``grace_period``, 2), or a bad mode.
    """

    kind = "asha"

    def __init__(
        self,
        max_t: int = 100,
        grace_period: int = 1,
        reduction_factor: int = 4,
        mode: Mode = "max",
    ):
        self.grace_period = _positive_int("ASHAScheduler", "grace_period", grace_period)
        self.max_t = _positive_int("ASHAScheduler", "max_t", max_t)
        self.reduction_factor = _positive_int("ASHAScheduler", "reduction_factor", reduction_factor)
        if self.reduction_factor < 2:
            raise SearchError(f"ASHAScheduler needs reduction_factor >= 2, got {reduction_factor}")
        if self.max_t < self.grace_period:
            raise SearchError(
                f"ASHAScheduler needs max_t >= grace_period, got max_t={max_t}, "
                f"grace_period={grace_period}"
            )
        self.mode = check_mode(mode)
        self.rungs = rung_iterations(self.grace_period, self.reduction_factor, self.max_t)
        """The iterations at which trials are judged, ascending."""
        self._recorded: dict[int, dict[Hashable, float]] = {rung: {} for rung in self.rungs}

    def on_result(self, trial_id: Hashable, iteration: int, value: float) -> Decision:
        """``"stop"`` if the trial falls below the cut at the rung it reached, or reached
        ``max_t``; ``"continue"`` otherwise (and between rungs)."""
        decision = CONTINUE
        reached = [rung for rung in self.rungs if rung <= iteration]
        if reached and trial_id not in self._recorded[reached[-1]]:
            decision = self._judge(self._recorded[reached[-1]], trial_id, value)
        return STOP if iteration >= self.max_t else decision

    def _judge(self, recorded: dict[Hashable, float], trial_id: Hashable, value: float) -> Decision:
        recorded[trial_id] = value
        survivors = max(1, len(recorded) // self.reduction_factor)
        mine = _score(value, self.mode)
        better = sum(_score(other, self.mode) > mine for other in recorded.values())
        return STOP if math.isnan(value) or better >= survivors else CONTINUE

    def next_decision(self, trial_id: Hashable, iteration: int) -> int | None:
        """The first rung after ``iteration`` where the trial is not judged yet, else ``max_t``."""
        later = [r for r in self.rungs if r > iteration and trial_id not in self._recorded[r]]
        return min([*later, max(self.max_t, iteration + 1)])

    def results_at(self, rung: int) -> dict[Hashable, float]:
        """The values recorded at ``rung`` (one of `rungs`), by trial, in arrival order."""
        return dict(self._recorded[rung])

    def to_state(self) -> dict:
        """Its settings and, per rung, ``[trial id, value]`` in arrival order."""
        recorded = [
            [rung, [[to_json(trial_id), value] for trial_id, value in values.items()]]
            for rung, values in self._recorded.items()
        ]
        return {
            "kind": self.kind,
            "max_t": self.max_t,
            "grace_period": self.grace_period,
            "reduction_factor": self.reduction_factor,
            "mode": self.mode,
            "recorded": recorded,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ASHAScheduler:
        """The scheduler `to_state` described.

        Raises:
            SearchError: for values recorded at an iteration that is not one of its rungs.
        """
        settings = ("max_t", "grace_period", "reduction_factor", "mode")
        asha = cls(*(state[name] for name in settings))
        for rung, values in state["recorded"]:
            if rung not in asha._recorded:
                message = f"ASHA's state records values at {rung}, not at a rung {asha.rungs}"
                raise SearchError(message)
            asha._recorded[rung] = {from_json(trial_id): value for trial_id, value in values}
        return asha


def rung_iterations(grace_period: int, reduction_factor: int, max_t: int) -> tuple[int, ...]:
    """``grace_period * reduction_factor**k`` for k = 0, 1, ... while at most ``max_t``."""
    rungs, rung = [], grace_period
    while rung <= max_t:
        rungs.append(rung)
        rung *= reduction_factor
    return tuple(rungs)


@dataclass
class _Member:
    """What PBT knows of one trial."""

    config: dict
    score: float | None = None
    last_perturbation: int = 0
    checkpoint_config: dict | None = None  # the config its latest checkpoint was trained with


def member_to_state(member: _Member) -> dict:
    """What PBT knows of a trial, as plain JSON values."""
    return {
        "config": to_json(member.config),
        "score": member.score,
        "last_perturbation": member.last_perturbation,
        "checkpoint_config": to_json(member.checkpoint_config),  # None before its first save
    }


def member_from_state(state: Mapping[str, Any]) -> _Member:
    """What `member_to_state` wrote."""
    return _Member(
        config=from_json(state["config"]),
        score=state["score"],
        last_perturbation=int(state["last_perturbation"]),
        checkpoint_config=from_json(state["checkpoint_config"]),
    )


class PBTScheduler(TrialScheduler):
    """Population based training: Jaderberg et al. 2017, "Population Based Training
    of Neural Networks", https://arxiv.org/abs/1711.09846 (asynchronous, as Ray
    Tune's ``PopulationBasedTraining``).

    State: each running trial's config, last value, the iteration of its last
    perturbation step, and the config of its latest checkpoint, if it has one.

    Policy: when a trial reports at least ``perturbation_interval`` iterations
    after its last step, it takes a step: if it is in the bottom
    ``quantile_fraction`` of the running trials with a value, it exploits a trial
    drawn from the top ``quantile_fraction`` that has a checkpoint (only those
    can be copied; Ray issue 27170), with that checkpoint's config perturbed by
    `perturb`. If no top trial has a checkpoint yet, it continues as it is. A
    trial's own checkpoint is forgotten when it exploits, until it saves again.
    Deterministic given ``seed`` and the order of events.

    The caller should save each trial's state (and call `on_checkpoint`) at
    least every ``perturbation_interval`` iterations, so that sources are fresh.

    Raises:
        SearchError: for ``perturbation_interval < 1``, ``quantile_fraction``
            outside [0, 0.5], ``resample_probability`` outside [0, 1], or a bad mode.
    """

    kind = "pbt"

    def __init__(
        self,
        space: Mapping[str, Any],
        perturbation_interval: int,
        mode: Mode = "max",
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        seed: int | np.random.Generator | None = None,
    ):
        self.perturbation_interval = _positive_int(
            "PBTScheduler", "perturbation_interval", perturbation_interval
        )
        if not 0 <= quantile_fraction <= 0.5:
            raise SearchError(
                f"PBTScheduler needs quantile_fraction in [0, 0.5], got {quantile_fraction!r}"
            )
        if not 0 <= resample_probability <= 1:
            raise SearchError(
                f"PBTScheduler needs resample_probability in [0, 1], got {resample_probability!r}"
            )
        self.space = dict(space)
        self.mode = check_mode(mode)
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self._rng = np.random.default_rng(seed)
        self._members: dict[Hashable, _Member] = {}

    def on_trial_add(self, trial_id: Hashable, config: Mapping[str, Any]) -> None:
        """Join the population with ``config``."""
        self._members[trial_id] = _Member(config=dict(config))

    def on_checkpoint(self, trial_id: Hashable) -> None:
        """The trial saved its state: from now on it may be a source, with its current config."""
        member = self._member(trial_id)
        member.checkpoint_config = dict(member.config)

    def on_trial_complete(self, trial_id: Hashable) -> None:
        """Leave the population: no longer ranked, nor a source."""
        self._members.pop(trial_id, None)

    def on_result(self, trial_id: Hashable, iteration: int, value: float) -> Decision:
        """An `Exploit` if the trial takes a step in the bottom quantile and a top
        trial with a checkpoint exists; ``"continue"`` otherwise."""
        member = self._member(trial_id)
        member.score = _score(value, self.mode)
        if iteration - member.last_perturbation < self.perturbation_interval:
            return CONTINUE
        member.last_perturbation = iteration
        scores = {t: m.score for t, m in self._members.items() if m.score is not None}
        bottom, top = bottom_and_top(scores, self.quantile_fraction)
        sources = [t for t in top if self._members[t].checkpoint_config is not None]
        if trial_id not in bottom or not sources:
            return CONTINUE
        source = sources[int(self._rng.integers(len(sources)))]
        config = perturb(
            self._members[source].checkpoint_config,
            self.space,
            self._rng,
            self.resample_probability,
        )
        member.config, member.checkpoint_config = config, None
        return Exploit(source=source, config=config)

    def on_trial_restore(self, trial_id: Hashable, iteration: int) -> None:
        """Its next step comes ``perturbation_interval`` iterations after the restored one."""
        self._member(trial_id).last_perturbation = iteration

    def next_decision(self, trial_id: Hashable, iteration: int) -> int | None:
        """``perturbation_interval`` iterations after the trial's last step."""
        member = self._member(trial_id)
        return max(member.last_perturbation + self.perturbation_interval, iteration + 1)

    def config_of(self, trial_id: Hashable) -> dict:
        """The trial's current config, as PBT last set it."""
        return dict(self._member(trial_id).config)

    def to_state(self) -> dict:
        """Its settings, space and generator, and ``[trial id, member]`` for each trial of
        the population, in the order they joined."""
        members = [[to_json(trial_id), member_to_state(m)] for trial_id, m in self._members.items()]
        return {
            "kind": self.kind,
            "space": space_to_state(self.space),
            "perturbation_interval": self.perturbation_interval,
            "mode": self.mode,
            "quantile_fraction": self.quantile_fraction,
            "resample_probability": self.resample_probability,
            "rng": rng_to_json(self._rng),
            "members": members,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> PBTScheduler:
        """The scheduler `to_state` described, drawing what it would have drawn next."""
        pbt = cls(
            space_from_state(state["space"]),
            state["perturbation_interval"],
            state["mode"],
            state["quantile_fraction"],
            state["resample_probability"],
            seed=rng_from_json(state["rng"]),
        )
        pbt._members = {from_json(t): member_from_state(m) for t, m in state["members"]}
        return pbt

    def _member(self, trial_id: Hashable) -> _Member:
        try:
            return self._members[trial_id]
        except KeyError:
            raise SearchError(
                f"PBTScheduler does not know trial {trial_id!r}: call on_trial_add(trial_id, "
                f"config) first"
            ) from None


def bottom_and_top(
    scores: Mapping[Hashable, float], fraction: float
) -> tuple[list[Hashable], list[Hashable]]:
    """The trials with the lowest and the highest scores, ``ceil(n * fraction)`` of
    each but at most half of ``n``; none if fewer than two trials have scores.

    Ties keep the order of ``scores``. Larger scores are better.
    """
    ranked = sorted(scores, key=scores.__getitem__)
    if len(ranked) <= 1:
        return [], []
    count = min(math.ceil(len(ranked) * fraction), len(ranked) // 2)
    return ranked[:count], ranked[len(ranked) - count :]


def perturb(
    config: Mapping[str, Any],
    space: Mapping[str, Any],
    rng: np.random.Generator,
    resample_probability: float = 0.25,
) -> dict:
    """A copy of ``config`` with each `uniform`, `loguniform`, `randint` and `choice`
    key of ``space`` moved; `grid` keys and constants stay as they are.

    With probability ``resample_probability`` a key is drawn afresh from its
    domain. Otherwise a number is multiplied by 0.8 or 1.2 (an int is rounded and
    moves at least one step) and clipped to the domain's bounds, and a choice
    moves to a neighbouring value in the list (staying put at an end half the
    time). A value missing from its domain's list, or missing, is drawn afresh.
    """
    new = dict(config)
    for key, domain in space.items():
        if isinstance(domain, (uniform, loguniform, randint, choice)):
            new[key] = perturb_value(domain, config.get(key), rng, resample_probability)
    return new


def perturb_value(
    domain: Any, value: Any, rng: np.random.Generator, resample_probability: float
) -> Any:
    """``value`` moved within ``domain`` (see `perturb`)."""
    if rng.random() < resample_probability:
        return domain.sample(rng)
    if isinstance(domain, choice):
        return _neighbour(domain.values, value, rng)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return domain.sample(rng)
    factor = 1.2 if rng.random() < 0.5 else 0.8
    if isinstance(domain, randint):
        moved = round(value * factor)
        if moved == value:
            moved = value + (1 if factor > 1 else -1)
        return int(min(max(moved, domain.low), domain.high - 1))
    return float(min(max(value * factor, domain.low), domain.high))


def _neighbour(values: Sequence, value: Any, rng: np.random.Generator) -> Any:
    if value not in values:
        return values[int(rng.integers(len(values)))]
    index = values.index(value) + (1 if rng.random() < 0.5 else -1)
    return values[min(max(index, 0), len(values) - 1)]


def scheduler_from_state(state: Mapping[str, Any]) -> TrialScheduler:
    """The trial scheduler whose ``to_state()`` is ``state``, deciding as it would have.

    Raises:
        SearchError: for a scheduler of a class that was named, not saved, or an unknown kind.
    """
    return restored(state, (FIFOScheduler, ASHAScheduler, PBTScheduler), "trial scheduler")
