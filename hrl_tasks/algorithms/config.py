"""Flat config dataclasses that reject unknown keys, wrong types and out-of-range values by name.

Each config class declares the range of its numeric keys in ``BOUNDS``, written as
in maths (``"> 0"``, ``">= 1"``, ``"[0, 1]"``, ``"(0, 1]"``); a class inherits its
bases' entries and may override them. Policy configs (``hrl_tasks.policies``)
declare theirs the same way, and the algorithm configs that inherit them check
them::

    PPOConfig.from_dict(lr=-1e-3)  # ConfigError: PPOConfig.lr must be > 0, got -0.001
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hrl_tasks.errors import ConfigError


def check_resources(owner: str, key: str, resources: Mapping | None) -> None:
    """A resource request: names (strings) to amounts (numbers >= 0), or None.

    Raises:
        ConfigError: naming the entry that is not, with an example of one that is.
    """
    if resources is None:
        return
    example = "such as {'CPU': 1} or {'GPU': 0.5}"
    if not isinstance(resources, Mapping):
        raise ConfigError(f"{owner}.{key} must be a dict {example}, got {resources!r}")
    for name, amount in resources.items():
        number = isinstance(amount, numbers.Real) and not isinstance(amount, bool)
        if not isinstance(name, str) or not number or not math.isfinite(amount) or amount < 0:
            raise ConfigError(
                f"{owner}.{key} must map resource names to amounts >= 0, {example}; "
                f"got {name!r}: {amount!r}"
            )


@dataclass
class AlgorithmConfig:
    """What every algorithm shares. Algorithm configs add their own fields."""

    env: str | Callable = "CartPole-v1"
    """A gymnasium id, a name registered with hrl_tasks.rollout.register_env, a
    PettingZoo name or module path (for the algorithms that play games), or a
    function that creates the env (see hrl_tasks.envs.make)."""
    env_config: dict = field(default_factory=dict)
    """Keyword arguments for the env's constructor."""
    env_backend: str = "gymnasium"
    """What steps the rollout workers' envs: ``"gymnasium"`` (its envs, in a vector env
    of this project's) or ``"envpool"`` (EnvPool's C++ envs of the id ``env``, e.g.
    ``CartPole-v1`` or Atari's ``Breakout-v5``; ``env_config`` for
    ``envpool.make_gymnasium``; `hrl_tasks.envs.envpool_backend`)."""
    num_workers: int = 2
    """Remote rollout workers (0 samples in the driver)."""
    num_envs_per_worker: int = 4
    """Vectorized envs in each rollout worker."""
    rollout_fragment_length: int = 64
    """Steps per env in one sample call."""
    seed: int | None = 0
    """Seeds envs, weights and sampling; None draws fresh seeds."""
    evaluation_episodes: int = 10
    """Episodes that evaluate() runs with deterministic actions."""
    learner_threads: int | None = 1
    """torch threads of the learner in the driver (the rollout workers take the
    other cores; small models learn faster on one); None: torch's default, a thread per
    core (``OMP_NUM_THREADS`` when set), even where an earlier run in the process set fewer."""
    metrics_smoothing_episodes: int = 20
    """episode_return_mean and episode_len_mean are over this many last episodes."""
    max_restarts: int = 100
    """Re-creations of each remote worker (rollout workers, replay shards) after its
    process died, before the run fails: a lost worker costs the samples it had in
    flight (RLlib's restart_failed_env_runners). Its calls are made again by the
    flow after the weights are re-sent, not re-issued on the initial weights."""
    max_env_errors: int = 3
    """Failures in a row of one env (a reset or step that raised) before sampling
    stops with EnvError; each failure ends its episode as a truncation, is counted in
    ``env_errors``, and the env is built again."""
    rollout_worker_resources: dict | None = None
    """Dask resources each remote rollout worker holds for its life, e.g. ``{"CPU": 1}``
    or ``{"GPU": 0.5}``: they place it on a worker that declares them, and keep that
    much from other work there (the engine's ledger). None reserves nothing: rollout
    workers share their worker's slots with everything else, as tasks without a
    request do. Dask resources are logical slots, not cores."""
    policies: dict | None = None
    """Multi-agent envs: policy id -> ``PolicySpec`` (or a dict of its fields, or
    None for the defaults) of each policy; a spec may name another algorithm
    (``PolicySpec("dqn")``) in a ``composition``. None: one policy,
    ``"default_policy"``, shared by every agent (all agents need the same spaces)."""
    policy_mapping_fn: Callable | None = None
    """Multi-agent envs: ``policy_mapping_fn(agent_id, episode) -> policy id``, called
    once per agent and episode (``episode.id`` is unique in the run). Needed with
    several policies."""
    policies_to_train: list | tuple | None = None
    """Multi-agent envs: the ids of the policies that learn; None: all of them. The
    others act with the weights they have (fixed opponents, frozen snapshots)."""
    on_train_result: Callable | None = None
    """Called as ``on_train_result(algo, result)`` after every iteration, before
    ``train()`` returns it: it may add metrics to ``result`` and change the algorithm
    (e.g. `SelfPlay` copies the learning policy into a frozen snapshot)."""
    num_learners: int = 0
    """Learner processes that take each update together, data-parallel: each computes
    the gradient of its share of the batch and the shares are averaged (an all-reduce
    over gloo), so that the update is the one a single learner takes on the whole
    batch (RLlib's learner group). 0 learns in the driver. PPO, IMPALA, APPO, SAC
    and TD3 can (their ``learner_group`` is True), on single-agent envs; AlphaZero in
    one learner worker."""
    learner_resources: dict | None = None
    """Dask resources each learner holds for its life, e.g. ``{"GPU": 1}``; None:
    ``{"CPU": 1}``. A learner's update waits for its peers, so each must have a thread
    of its own: the request must not let two learners share one."""
    learner_group_plaintext: bool = False
    """Accept a learner group of several processes on a cluster that encrypts its
    connections (TLS): the group's gradients and rendezvous travel unencrypted between
    the learner processes (gloo over plain TCP; no code runs from them). False refuses
    such a group before any learner starts; True forms it with a warning. A
    ``--runner`` run needs no consent (its learners listen on the run's interface) and
    warns too; a cluster that speaks plain TCP anyway needs none."""
    record_experience: str | None = None
    """A directory (a local path, or any fsspec URL such as ``s3://bucket/run``) where
    every rollout worker writes the steps it samples as Parquet files, whole episodes
    in parts of 100,000 rows or 64 MB, the rest when the run stops
    (`hrl_tasks.data.experience`; needs the ``offline`` extra). Single-agent runs."""
    direct_calls: bool = True
    """Call the rollout workers directly instead of through the Dask scheduler:
    about 1.3 ms of the driver's CPU per call instead of 5.5 ms here. False makes
    each call an ordinary task, shown in the dashboard's task stream."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 0",
        "num_envs_per_worker": ">= 1",
        "rollout_fragment_length": ">= 1",
        "seed": "[0, 2**63)",  # torch seeds are 64-bit; evaluation adds 10_000
        "evaluation_episodes": ">= 1",
        "learner_threads": ">= 1",
        "metrics_smoothing_episodes": ">= 1",
        "max_restarts": ">= 0",
        "max_env_errors": ">= 0",
        "num_learners": ">= 0",
    }
    """Each numeric key's range (None, where a key allows it, is always valid)."""
    samples_with_rollout_workers: ClassVar[bool] = True
    """False where no rollout worker samples (tasks play the episodes, or the data is
    recorded): ``record_experience`` is refused there."""
    embedded_threads_per_worker: ClassVar[int] = 1
    """Threads of each worker process of the embedded cluster (`embedded_cluster`)."""

    def __post_init__(self):
        """Each value checked against its key's type (ints taken for floats, lists for
        tuples), its bounds, then the keys together: a config built directly is
        checked as one read `from_dict` is."""
        owner = type(self).__name__
        for key, hint in field_types(type(self)).items():
            setattr(self, key, check_type(owner, key, getattr(self, key), hint))
        check_bounds(self)
        self.check()

    def embedded_cluster(self) -> dict[str, int] | None:
        """The ``Engine.local`` arguments of the cluster that a run of this config
        starts when it is given no engine (None: it runs without one): a worker process
        per rollout worker, at least one, and one per learner. Pure."""
        return {
            "n_workers": max(1, self.num_workers) + self.num_learners,
            "threads_per_worker": self.embedded_threads_per_worker,
        }

    def check_env_backend(self) -> None:
        """``env_backend`` is a backend, and EnvPool's knows ``env``.

        Raises:
            ConfigError: naming what would be right.
        """
        from hrl_tasks.envs.envpool_backend import BACKENDS, envpool_ids, nearest

        owner = f"{type(self).__name__}.env_backend"
        if self.env_backend not in BACKENDS:
            raise ConfigError(f"{owner} must be one of {BACKENDS}, got {self.env_backend!r}")
        if self.env_backend == "gymnasium":
            return
        try:
            known = envpool_ids()
        except ModuleNotFoundError as exc:
            raise ConfigError(f"{owner}='envpool': {exc}") from None
        if not isinstance(self.env, str) or self.env not in known:
            raise ConfigError(
                f"{owner}='envpool' needs env to be an EnvPool id, got {self.env!r}"
                f"{nearest(self.env, known)}"
            )

    def check(self) -> None:
        """Checks between keys (each key's own range is in ``BOUNDS``); configs add theirs.

        Raises:
            ConfigError: naming the keys that do not fit together.
        """
        check_resources(
            type(self).__name__, "rollout_worker_resources", self.rollout_worker_resources
        )
        check_resources(type(self).__name__, "learner_resources", self.learner_resources)
        self.check_env_backend()
        if self.record_experience is not None and not self.samples_with_rollout_workers:
            raise ConfigError(
                f"{type(self).__name__}.record_experience must be None: no rollout worker "
                "samples in this algorithm, so there is nothing to record"
            )
        if self.policies is not None:
            from hrl_tasks.policies.policy_map import as_policy_spec

            owner = f"{type(self).__name__}.policies"
            self.policies = {
                pid: as_policy_spec(spec, owner, pid) for pid, spec in self.policies.items()
            }
            if not self.policies:
                raise ConfigError(f"{owner} must hold at least one policy, or be None; got {{}}")
        if self.policies_to_train is not None:
            owner = f"{type(self).__name__}.policies_to_train"
            self.policies_to_train = tuple(self.policies_to_train)
            known = set(self.policies or {"default_policy": None})
            unknown = [pid for pid in self.policies_to_train if pid not in known]
            if unknown or not self.policies_to_train:
                raise ConfigError(
                    f"{owner} must name at least one of the policies {sorted(map(str, known))}"
                    f" (or be None: all of them); got {list(self.policies_to_train)}"
                )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None = None, **overrides: Any):
        """Build a config, naming any unknown key, wrong type or out-of-range value.

        Raises:
            ConfigError: for a key the config does not have (with the closest
                names it does have), a value of the wrong type, a number outside
                its key's ``BOUNDS``, a float NaN or infinity, or keys that do
                not fit together (`check`).
        """
        merged = {**(values or {}), **overrides}
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(merged) - set(names))
        if unknown:
            hints = {k: difflib.get_close_matches(k, names, n=1) for k in unknown}
            said = ", ".join(
                f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items()
            )
            raise ConfigError(
                f"{cls.__name__} has no key {said}. Allowed keys: {', '.join(sorted(names))}"
            )
        return cls(**merged)  # types, bounds and the keys together: __post_init__

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def pick(self, target: type):
        """The fields of dataclass ``target`` (e.g. a policy config) taken from this config."""
        return target(**{f.name: getattr(self, f.name) for f in dataclasses.fields(target)})


def check_schedule(owner: str, key: str, schedule: tuple) -> None:
    """A piecewise-linear schedule: ``((t, value), ...)`` pairs, ``t`` from 0 up and
    never falling, each value finite and > 0.

    Raises:
        ConfigError: naming the key and what a schedule looks like.
    """
    pairs = all(len(point) == 2 for point in schedule)
    times = [point[0] for point in schedule] if pairs else []
    good = (
        pairs
        and len(schedule) > 0
        and times[0] >= 0
        and all(a <= b for a, b in zip(times, times[1:], strict=False))
        and all(math.isfinite(t) for t in times)
        and all(math.isfinite(v) and v > 0 for _, v in schedule)
    )
    if not good:
        raise ConfigError(
            f"{owner}.{key} must be ((steps, value), ...) pairs with steps from 0 up and each "
            f"value > 0, such as ((0, 2e-3), (200000, 2e-4)), got {schedule!r}"
        )


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The type of each field of dataclass ``cls``, its annotations resolved."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def check_type(owner: str, key: str, value: Any, hint: Any) -> Any:
    """``value`` if it fits ``hint`` (ints are accepted for floats, lists for tuples)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return check_type(owner, key, value, option)
            except ConfigError:
                continue
        raise _wrong(owner, key, value, hint)
    if hint is type(None):
        if value is None:
            return None
        raise _wrong(owner, key, value, hint)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            raise _wrong(owner, key, value, hint)
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return tuple(check_type(owner, key, v, item) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise _wrong(owner, key, value, hint)
        return value
    if hint is Any:
        return value
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                as_float = float(value)
            except OverflowError:  # an int beyond the largest float
                raise _wrong(owner, key, value, hint) from None
            if isinstance(value, int) and as_float != value:  # a float cannot hold it exactly
                raise _wrong(owner, key, value, hint)
            return as_float
        raise _wrong(owner, key, value, hint)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _wrong(owner, key, value, hint)
    if isinstance(hint, type) and not isinstance(value, hint):
        raise _wrong(owner, key, value, hint)
    return value


def _wrong(owner: str, key: str, value: Any, hint: Any) -> ConfigError:
    shown = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
    return ConfigError(f"{owner}.{key} must be {shown}, got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class Bound:
    """A range of numbers, written as in maths: ``"> 0"``, ``">= 1"``, ``"[0, 1]"``,
    ``"(0, 1]"``, ``"[0, 2**63)"``. ``value in bound`` tests it (NaN is in no bound)."""

    text: str
    low: float = -math.inf
    high: float = math.inf
    low_closed: bool = True
    high_closed: bool = True

    @staticmethod
    @functools.cache
    def parse(text: str) -> Bound:
        """Raises ValueError if ``text`` is not a comparison or an interval."""
        comparison = re.fullmatch(r"\s*(>=|>|<=|<)\s*(\S+)\s*", text)
        if comparison:
            op, number = comparison.group(1), _number(comparison.group(2))
            if op.startswith(">"):
                return Bound(text, low=number, low_closed=op == ">=")
            return Bound(text, high=number, high_closed=op == "<=")
        interval = re.fullmatch(r"\s*([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])\s*", text)
        if interval:
            left, low, high, right = interval.groups()
            return Bound(text, _number(low), _number(high), left == "[", right == "]")
        raise ValueError(f"not a bound: {text!r} (write e.g. '> 0', '>= 1' or '[0, 1]')")

    def __contains__(self, value: float) -> bool:
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def __str__(self) -> str:
        """``"> 0"`` or ``"in [0, 1]"``: what follows "must be" in a message."""
        text = self.text.strip()
        return f"in {text}" if text[0] in "[(" else text


def _number(text: str) -> float:
    """``"1"``, ``"0.5"``, ``"1e-3"`` or ``"2**63"`` (ints stay exact)."""
    base, _, power = text.partition("**")
    try:
        value = int(base)
    except ValueError:
        value = float(base)
    return value ** int(power) if power else value


def bounds_of(cls: type) -> dict[str, Bound]:
    """The ``BOUNDS`` of ``cls`` and of its bases, parsed; a subclass's entry wins."""
    merged: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        merged.update(vars(klass).get("BOUNDS", {}))
    return {key: Bound.parse(text) for key, text in merged.items()}


def _flat(values: tuple | list) -> list:
    return [x for v in values for x in (_flat(v) if isinstance(v, (tuple, list)) else (v,))]


def check_bounds(config: Any) -> None:
    """Check each number of a config dataclass (policy configs too) against its ``BOUNDS``.

    Numbers inside tuples (such as ``hidden`` widths, or a schedule's pairs) are
    checked one by one; a float NaN or infinity is rejected whatever the bound. Values of other types
    are left to `check_type`.

    Raises:
        ConfigError: for the first value out of range, e.g.
            ``PPOConfig.lr must be > 0, got -0.001``.
    """
    owner, bounds = type(config).__name__, bounds_of(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        many = isinstance(value, (tuple, list))
        for item in _flat(value) if many else (value,):
            if not isinstance(item, numbers.Real) or isinstance(item, bool):
                continue
            if not isinstance(item, numbers.Integral) and not math.isfinite(item):
                raise ConfigError(f"{owner}.{f.name} must be finite, got {value!r}")
            bound = bounds.get(f.name)
            if bound is not None and item not in bound:
                must = "must hold only values" if many else "must be"
                raise ConfigError(f"{owner}.{f.name} {must} {bound}, got {value!r}")
