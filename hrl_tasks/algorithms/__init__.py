"""Algorithms, each a flat config and a plan: ``hrl_tasks.train("ppo", env=..., stop=...)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hrl_tasks.algorithms.a3c import A3C, A3CConfig
from hrl_tasks.algorithms.algorithm import Algorithm, CheckpointError
from hrl_tasks.algorithms.apex import ApeX, ApeXConfig
from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.dqn import DQN, DQNConfig
from hrl_tasks.algorithms.es import ES, ESConfig
from hrl_tasks.algorithms.impala import IMPALA, IMPALAConfig
from hrl_tasks.algorithms.pg import A2C, A2CConfig
from hrl_tasks.algorithms.ppo import PPO, PPOConfig

ALGORITHMS: Mapping[str, type[Algorithm]] = {
    "ppo": PPO,
    "a2c": A2C,
    "a3c": A3C,
    "dqn": DQN,
    "impala": IMPALA,
    "es": ES,
    "apex": ApeX,
}


def get_algorithm(name: str) -> type[Algorithm]:
    """The Algorithm class called ``name`` (case-insensitive)."""
    try:
        return ALGORITHMS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}"
        ) from None


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
        algorithm: ``"ppo"``, ``"a2c"`` or ``"a3c"``.
        env: the gymnasium id.
        stop: any of ``episode_return_mean`` (stop when at least this),
            ``env_steps_sampled``, ``time_total_s``, ``iteration`` (stop when reached).
            Default: 10 iterations.
        engine: run on this engine instead of an embedded cluster.
        callback: called with each iteration's metrics.
        **config: the algorithm's config keys.

    Example::

        algo, result = hrl_tasks.train("ppo", env="CartPole-v1", stop={"episode_return_mean": 450})
        algo.stop()
    """
    stop = dict(stop or {"iteration": 10})
    known = {"episode_return_mean", "env_steps_sampled", "time_total_s", "iteration"}
    if set(stop) - known:
        raise ConfigError(
            f"unknown stop keys {sorted(set(stop) - known)}; allowed: {sorted(known)}"
        )
    algo = get_algorithm(algorithm)(dict(config, env=env), engine=engine)
    while True:
        result = algo.train()
        if callback is not None:
            callback(result)
        if stop_reached(result, stop):
            return algo, result


def stop_reached(result: Mapping, stop: Mapping[str, float]) -> bool:
    """Whether any stop condition holds for ``result``."""
    return any(result.get(key, float("-inf")) >= value for key, value in stop.items())


__all__ = [
    "ALGORITHMS",
    "A2C",
    "A2CConfig",
    "A3C",
    "A3CConfig",
    "Algorithm",
    "ApeX",
    "ApeXConfig",
    "AlgorithmConfig",
    "CheckpointError",
    "ConfigError",
    "DQN",
    "DQNConfig",
    "ES",
    "ESConfig",
    "IMPALA",
    "IMPALAConfig",
    "PPO",
    "PPOConfig",
    "get_algorithm",
    "stop_reached",
    "train",
]
