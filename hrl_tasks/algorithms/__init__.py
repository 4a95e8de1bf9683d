"""Algorithms, each a flat config and a plan: ``hrl_tasks.train("ppo", env=..., stop=...)``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hrl_tasks.algorithms.checkpoint import latest_checkpoint, read_checkpoint
from hrl_tasks.algorithms.run_files import RunFiles
from hrl_tasks.errors import ConfigError
from hrl_tasks.lazy import lazy_names
from hrl_tasks.registry import ALGORITHM_PATHS, get_algorithm
from hrl_tasks.run_dir import claim

if TYPE_CHECKING:
    from hrl_tasks.algorithms.algorithm import Algorithm

# The algorithms load on first use: their plans import torch, and a config (such as
# ``hrl-tasks train``'s, checked before its cluster starts) is read without them.
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "a3c": ("A3C", "A3CConfig"),
        "algorithm": ("Algorithm", "CheckpointError"),
        "alphazero": ("AlphaZero", "AlphaZeroConfig"),
        "apex": ("ApeX", "ApeXConfig"),
        "appo": ("APPO", "APPOConfig"),
        "config": ("AlgorithmConfig",),
        "cql": ("CQL", "CQLConfig"),
        "dqn": ("DQN", "DQNConfig"),
        "es": ("ES", "ESConfig"),
        "impala": ("IMPALA", "IMPALAConfig"),
        "iql": ("IQL", "IQLConfig"),
        "marwil": ("BC", "MARWIL", "BCConfig", "MARWILConfig"),
        "mpc": ("MPC", "MPCConfig"),
        "pg": ("A2C", "A2CConfig"),
        "ppo": ("PPO", "PPOConfig"),
        "rainbow": ("Rainbow", "RainbowConfig"),
        "sac": ("SAC", "SACConfig"),
        "td3": ("TD3", "TD3Config"),
    },
)

STOP_GRACE_S = 5.0  # how long past a time stop an iteration may go on waiting


class AlgorithmTable(Mapping):
    """Every algorithm class by the name users type, each imported when first looked
    up (`hrl_tasks.registry.get_algorithm`; the registry says where each lives)."""

    def __getitem__(self, name: str) -> type[Algorithm]:
        if name not in ALGORITHM_PATHS:
            raise KeyError(name)
        return get_algorithm(name)

    def __iter__(self) -> Iterator[str]:
        return iter(ALGORITHM_PATHS)

    def __len__(self) -> int:
        return len(ALGORITHM_PATHS)


ALGORITHMS: Mapping[str, type[Algorithm]] = AlgorithmTable()
"""Every algorithm by the name users type, imported on first look-up."""


def train(
    algorithm: str,
    env: str,
    stop: Mapping[str, float] | None = None,
    engine=None,
    callback: Callable[[dict], None] | None = None,
    *,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    force: bool = False,
    checkpoint_every: int = 10,
    keep_checkpoints: int = 5,
    **config,
) -> tuple[Algorithm, dict]:
    """Train until a stop condition holds; returns the algorithm (still running) and the last metrics.

    Args:
        algorithm: a name of ``ALGORITHMS``, e.g. ``"ppo"`` or ``"alphazero"``.
        env: an env spec (see :mod:`hrl_tasks.envs.make`).
        stop: metric -> value: stop when any reported metric reaches its value,
            e.g. ``episode_return_mean``, ``env_steps_sampled``, ``time_total_s``,
            ``iteration``, or AlphaZero's ``win_rate/random``; ``("<=", x)`` instead
            of a value stops when the metric falls to ``x`` (``loss_rate/minimax``).
            Default: 10 iterations.
        engine: run on this engine instead of an embedded cluster.
        callback: called with each iteration's metrics.
        out: a directory to write the run into, as ``hrl-tasks train --out`` does:
            ``metrics.jsonl`` and ``checkpoints/checkpoint-NNNNNN.hrl`` (every
            ``checkpoint_every`` iterations and at the end, the ``keep_checkpoints``
            of the highest iterations kept; 0 keeps all). None writes nothing.
        resume: continue the run saved in ``out`` (its last checkpoint and config,
            ``config`` over it).
        force: if ``out`` holds another run's files, move them aside to
            ``<out>.old-<time>`` instead of refusing.
        **config: the algorithm's config keys.

    A ``time_total_s`` stop also bounds every wait: an iteration still waiting on
    the engine 5 s after the limit ends there, and the last finished iteration's
    metrics are returned (the algorithm's state is then that of an iteration cut
    short: save it only if a checkpoint of that state will do).

    Raises:
        RunDirError: if ``out`` holds another run's files, neither ``resume`` nor
            ``force`` given (before any cluster starts).
        ConfigError: for a bad config or stop key.

    Example::

        algo, result = hrl_tasks.train("ppo", env="CartPole-v1", stop={"episode_return_mean": 450})
        algo.stop()
    """
    stop = dict(stop or {"iteration": 10})
    config = dict(config, env=env)
    state = None
    if out is not None and resume:
        state = read_checkpoint(latest_checkpoint(Path(out) / "checkpoints", run_only=True))
        config = {**state["config"], **config}
    algo_cls = get_algorithm(algorithm)
    algo_cls.config_class.from_dict(config)  # a bad config fails before the directory is taken
    if out is not None and not resume:
        claim(Path(out), Path(out), force=force, resume_hint="resume=True")
    algo = algo_cls(config, engine=engine)
    try:
        if state is not None:
            algo.set_state(state)
        files = RunFiles(out, checkpoint_every, keep_checkpoints) if out is not None else None
        with files or contextlib.nullcontext():
            result, cut_short = train_until(algo, stop, callback, files)
            if files is not None and not cut_short:  # a cut iteration's state is not saved
                files.save(algo, result["iteration"])
    except BaseException:
        algo.stop()
        raise
    return algo, result


def train_until(
    algo: Algorithm, stop: Mapping, callback, files: RunFiles | None
) -> tuple[dict, bool]:
    """Train ``algo`` until a ``stop`` condition holds (or its time stop cut an iteration
    short); returns the last finished iteration's metrics, and whether an iteration was
    cut short.

    Raises:
        ConfigError: if ``stop`` names a metric the algorithm does not report.
        DeadlineReached: if the time stop cut the first iteration short.
    """
    from hrl_tasks.scheduler import DeadlineReached

    result = None
    with algo.engine.time_limit(time_limit(stop, algo)):
        while True:
            try:
                result = algo.train()
            except DeadlineReached:  # an iteration that could not end in time
                if result is None:
                    raise
                return result, True
            check_stop_keys(stop, result, algo.name)
            if files is not None:
                files.record(algo, result)
            if callback is not None:
                callback(result)
            if stop_reached(result, stop):
                return result, False


def check_stop_keys(stop: Mapping, result: Mapping, algorithm: str) -> None:
    """Stop conditions must name metrics the algorithm reports (known after one
    iteration); evaluation metrics may appear later, so keys with a '/' are only
    checked by name. Pure.

    Raises:
        ConfigError: naming the keys and the metrics reported.
    """
    unknown = [k for k in stop if k not in result and "/" not in k]
    if unknown:
        reported = ", ".join(sorted(k for k in result if not k.startswith("info/")))
        raise ConfigError(
            f"stop {', '.join(unknown)}: not reported by {algorithm}; the metrics are: {reported}"
        )


def time_limit(stop: Mapping, algo: Algorithm, grace_s: float = STOP_GRACE_S) -> float | None:
    """Seconds the run's waits on the engine may last: its ``time_total_s`` stop, less
    the training time it already has, plus ``grace_s`` for the iteration in progress to
    end on its own; None without a time stop. An iteration still waiting then ends
    with :class:`~hrl_tasks.scheduler.DeadlineReached`."""
    limit = stop.get("time_total_s")
    if limit is None or isinstance(limit, tuple):
        return None
    return max(0.0, float(limit) - algo.time_total_s) + grace_s


def load(
    path: str | os.PathLike,
    *,
    train: bool = False,
    engine=None,
    env=None,
    config=None,
    trust_env_modules: bool = False,
) -> Algorithm:
    """Restores any algorithm from a checkpoint, ready to act.

    Args:
        path: A checkpoint file, a directory of them (the newest is taken),
            or a run directory of ``hrl-tasks train`` (its ``checkpoints/``).
        train: Also build the cluster side (an embedded cluster unless
            ``engine`` is given), so that ``train()`` continues the run.
            By default nothing is started: the algorithm only acts.
        engine: Run on this engine (implies ``train``).
        env: The env, when the run was made with a creator function (a
            checkpoint keeps only its name).
        config: Keys over the checkpoint's config, e.g. the code a checkpoint does
            not keep: ``{"policy_mapping_fn": fn}`` to train a multi-agent run on.
        trust_env_modules: Accept a checkpoint's env id that imports a module no
            installed distribution provides (``mymodule:MyEnv-v0`` with ``mymodule.py``
            in the working directory): importing runs the module's code, so say it
            only of checkpoints you trust. An ``env`` given here is not checked.

    Returns:
        The algorithm; call ``compute_single_action(observation)`` on it.

    Raises:
        CheckpointError: If ``path`` holds no readable checkpoint.
        UntrustedEnvError: If the checkpoint's env would import such a module, and
            ``trust_env_modules`` is not given
            (`hrl_tasks.envs.make.check_env_from_file`).

    Example::

        algo = hrl_tasks.load("runs/ppo-CartPole-v1")
        action = algo.compute_single_action(observation)
    """
    path = Path(path)
    if path.is_dir() and (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    path = latest_checkpoint(path)
    state = read_checkpoint(path)
    if env is None and "env" not in (config or {}):  # the env the file names
        from hrl_tasks.envs.make import check_env_from_file

        check_env_from_file(state["config"].get("env"), path, trust_env_modules)
    cls = get_algorithm(str(state.get("algorithm")))
    config = dict(state["config"], **({} if env is None else {"env": env}), **(config or {}))
    if train or engine is not None:
        algo = cls(config, engine=engine)
        try:
            algo.set_state(state)
        except BaseException:
            algo.stop()
            raise
        return algo
    algo = cls.for_acting(config)
    algo.set_acting_state(state)
    return algo


def stop_reached(result: Mapping, stop: Mapping[str, float | tuple[str, float]]) -> bool:
    """Whether any stop condition holds for ``result``: a number means "at least this",
    ``("<=", x)`` "at most x" (for losses and loss rates), ``(">=", x)`` "at least x"."""
    for key, condition in stop.items():
        if result.get(key) is None:  # not reported, or no value yet (NaN in metrics.jsonl)
            continue
        op, value = condition if isinstance(condition, tuple) else (">=", condition)
        if result[key] >= value if op == ">=" else result[key] <= value:
            return True
    return False


__all__ = [
    "ALGORITHMS",
    "A2C",
    "AlphaZero",
    "AlphaZeroConfig",
    "A2CConfig",
    "A3C",
    "A3CConfig",
    "APPO",
    "APPOConfig",
    "Algorithm",
    "ApeX",
    "ApeXConfig",
    "AlgorithmConfig",
    "BC",
    "BCConfig",
    "CQL",
    "CQLConfig",
    "CheckpointError",
    "ConfigError",
    "DQN",
    "DQNConfig",
    "ES",
    "ESConfig",
    "IMPALA",
    "IMPALAConfig",
    "IQL",
    "IQLConfig",
    "MARWIL",
    "MARWILConfig",
    "MPC",
    "MPCConfig",
    "PPO",
    "PPOConfig",
    "SAC",
    "SACConfig",
    "TD3",
    "TD3Config",
    "get_algorithm",
    "load",
    "stop_reached",
    "time_limit",
    "train",
]
