"""Algorithms, each a flat config and a plan: ``hrl_tasks.train("ppo", env=..., stop=...)``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from hrl_tasks.algorithms.a3c import A3C, A3CConfig
from hrl_tasks.algorithms.algorithm import Algorithm, CheckpointError
from hrl_tasks.algorithms.alphazero import AlphaZero, AlphaZeroConfig
from hrl_tasks.algorithms.apex import ApeX, ApeXConfig
from hrl_tasks.algorithms.appo import APPO, APPOConfig
from hrl_tasks.algorithms.checkpoint import read_checkpoint
from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.cql import CQL, CQLConfig
from hrl_tasks.algorithms.dqn import DQN, DQNConfig
from hrl_tasks.algorithms.es import ES, ESConfig
from hrl_tasks.algorithms.impala import IMPALA, IMPALAConfig
from hrl_tasks.algorithms.marwil import BC, MARWIL, BCConfig, MARWILConfig
from hrl_tasks.algorithms.mpc import MPC, MPCConfig
from hrl_tasks.algorithms.pg import A2C, A2CConfig
from hrl_tasks.algorithms.ppo import PPO, PPOConfig
from hrl_tasks.algorithms.sac import SAC, SACConfig
from hrl_tasks.algorithms.td3 import TD3, TD3Config
from hrl_tasks.errors import ConfigError
from hrl_tasks.registry import ALGORITHM_PATHS, get_algorithm, load_object

STOP_GRACE_S = 5.0  # how long past a time stop an iteration may go on waiting

ALGORITHMS: Mapping[str, type[Algorithm]] = {
    name: load_object(path) for name, path in ALGORITHM_PATHS.items()
}
"""Every algorithm by the name users type (``hrl_tasks.registry`` says where each lives)."""


def train(
    algorithm: str,
    env: str,
    stop: Mapping[str, float] | None = None,
    engine=None,
    callback: Callable[[dict], None] | None = None,
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
        **config: the algorithm's config keys.

    A ``time_total_s`` stop also bounds every wait: an iteration still waiting on
    the engine 5 s after the limit ends there, and the last finished iteration's
    metrics are returned (the algorithm's state is then that of an iteration cut
    short: save it only if a checkpoint of that state will do).

    Example::

        algo, result = hrl_tasks.train("ppo", env="CartPole-v1", stop={"episode_return_mean": 450})
        algo.stop()
    """
    from hrl_tasks.scheduler import DeadlineReached

    stop = dict(stop or {"iteration": 10})
    algo = get_algorithm(algorithm)(dict(config, env=env), engine=engine)
    result = None
    with algo.engine.time_limit(time_limit(stop, algo)):
        while True:
            try:
                result = algo.train()
            except DeadlineReached:  # an iteration that could not end in time
                if result is None:
                    algo.stop()
                    raise
                return algo, result
            unknown = [k for k in stop if k not in result and "/" not in k]
            if unknown:
                algo.stop()
                raise ConfigError(
                    f"unknown stop keys {unknown}; {algorithm} reports: {sorted(result)}"
                )
            if callback is not None:
                callback(result)
            if stop_reached(result, stop):
                return algo, result


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
    path: str | os.PathLike, *, train: bool = False, engine=None, env=None, config=None
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

    Returns:
        The algorithm; call ``compute_single_action(observation)`` on it.

    Raises:
        CheckpointError: If ``path`` holds no readable checkpoint.

    Example::

        algo = hrl_tasks.load("runs/ppo-CartPole-v1")
        action = algo.compute_single_action(observation)
    """
    path = Path(path)
    if path.is_dir() and (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    state = read_checkpoint(path)
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
