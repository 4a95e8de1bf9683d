"""What ES runs on the workers: the shared noise table and the evaluation of perturbations.

Every process (each worker, and the driver) builds the noise table once from
its seed, with ``hrl_tasks.worker_local``, so a perturbation travels as an
index into it: ``eps_i = table[i : i + num_params]`` (Salimans et al. 2017,
section 2.1, https://arxiv.org/abs/1703.03864). An evaluation is a pure task:
the same ``(theta, index, env_seed)`` gives the same returns, so the engine's
retries and speculative backups apply unchanged.
"""

from __future__ import annotations

import math
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.algorithms.es.config import NoiseTableConfig
from hrl_tasks.envs import EnvError, env_creator, env_name
from hrl_tasks.policies import ESPolicy
from hrl_tasks.scheduler import EngineError, worker_local


def make_noise_table(seed: int, size: int) -> np.ndarray:
    """``size`` standard normal float32 values drawn from ``seed`` (read-only)."""
    table = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)
    table.flags.writeable = False
    return table


def shared_noise_table(seed: int, size: int) -> np.ndarray:
    """The noise table of this process, built on first use (once per worker process)."""
    factory = lambda: make_noise_table(seed, size)  # noqa: E731
    try:
        return worker_local(f"es-noise-{seed}-{size}", factory)
    except EngineError:  # a driver thread with no engine open: build it here
        return factory()


class NoiseTablePolicy(ESPolicy):
    """An `ESPolicy` whose ``noise(i)`` is the slice of the shared noise table at index ``i``.

    So the ``noise_seeds`` column of an ES batch holds table indices, and
    `ESPolicy.loss` (centered ranks, antithetic weights, L2) works unchanged. Its
    config is a `NoiseTableConfig`; None uses the defaults.

    Raises:
        ValueError: If the noise table is smaller than the policy's parameters.
    """

    config_class = NoiseTableConfig

    def setup(self) -> None:
        """Checks that the noise table is long enough for a perturbation of every parameter."""
        if self.config.noise_table_size < self.num_params:
            raise ValueError(
                f"noise_table_size={self.config.noise_table_size} is smaller than the "
                f"{self.num_params} parameters of the policy"
            )

    @property
    def max_noise_index(self) -> int:
        """Indices are drawn from ``[0, max_noise_index)``."""
        return self.config.noise_table_size - self.num_params + 1

    def noise(self, seed: int) -> np.ndarray:
        cfg = self.config
        table = shared_noise_table(cfg.noise_table_seed, cfg.noise_table_size)
        return table[int(seed) : int(seed) + self.num_params]


@dataclass
class Evaluator:
    """Everything an evaluation task needs besides theta: picklable, small, sent by value.

    Args:
        env: the env (as resolved by ``hrl_tasks.rollout.resolve_env``).
        env_config: keyword arguments for the env.
        observation_space: the policy's observation space.
        action_space: the policy's action space.
        policy_config: the `NoiseTableConfig` (sigma, table seed and size, hidden widths).
        episodes: episodes per evaluated parameter vector (their returns are averaged).
        max_episode_steps: cap on an episode's steps; None keeps the env's own limit.
        token: names the policy and env this evaluator keeps in each worker thread
            (``worker_local``; a fresh token per Evaluator, kept for the process's life).
    """

    env: Any
    env_config: dict
    observation_space: gym.Space
    action_space: gym.Space
    policy_config: NoiseTableConfig
    episodes: int = 1
    max_episode_steps: int | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def noise(self, index: int, size: int) -> np.ndarray:
        cfg = self.policy_config
        table = shared_noise_table(cfg.noise_table_seed, cfg.noise_table_size)
        return table[index : index + size]

    def run(
        self, theta: np.ndarray, env_seed: int, episodes: int | None = None
    ) -> tuple[list[float], list[int]]:
        """``episodes`` (default ``self.episodes``) of the deterministic policy at ``theta``,
        on env seeds ``env_seed + k``; returns their returns and lengths."""
        # One policy and env per thread of each worker process, built on first use.
        key = f"es-evaluator-{self.token}-{threading.get_ident()}"
        policy, env = worker_local(key, self._build)
        policy.set_flat(theta)
        returns, lengths = [], []
        for k in range(self.episodes if episodes is None else episodes):
            total, steps = self._episode(policy, env, env_seed + k)
            returns.append(total)
            lengths.append(steps)
        return returns, lengths

    def _episode(self, policy: ESPolicy, env: gym.Env, seed: int) -> tuple[float, int]:
        obs, _ = env.reset(seed=seed)
        box = isinstance(self.action_space, gym.spaces.Box)
        total, steps, done = 0.0, 0, False
        while not done and (self.max_episode_steps is None or steps < self.max_episode_steps):
            action = policy.compute_actions(np.asarray(obs)[None])[0][0]
            if box:
                action = np.clip(action, self.action_space.low, self.action_space.high)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            steps += 1
            if not (math.isfinite(total) and np.isfinite(obs).all()):
                raise EnvError(
                    f"env {env_name(self.env)!r} returned a non-finite "
                    f"{'reward' if not math.isfinite(total) else 'observation'} at step {steps} "
                    f"of an evaluation episode (seed {seed})"
                )
            done = terminated or truncated
        return total, steps

    def _build(self) -> tuple[ESPolicy, gym.Env]:
        policy = ESPolicy(
            self.observation_space, self.action_space, self.policy_config, single_thread=True
        )
        return policy, env_creator(self.env, self.env_config)()


def evaluate_pair(evaluator: Evaluator, theta: np.ndarray, noise_index: int, env_seed: int) -> dict:
    """A pure task: episodes at ``theta + sigma eps`` and ``theta - sigma eps`` (antithetic).

    Both signs run on the same env seeds (common random numbers).

    Returns:
        ``returns`` ``[2]`` (mean episode return at +eps, at -eps), ``episode_returns``
        and ``episode_lengths`` (every episode), and ``env_steps`` (all steps).
    """
    sigma = evaluator.policy_config.noise_stdev
    eps = evaluator.noise(noise_index, theta.size)
    pos_returns, pos_lengths = evaluator.run(theta + sigma * eps, env_seed)
    neg_returns, neg_lengths = evaluator.run(theta - sigma * eps, env_seed)
    return {
        "returns": [float(np.mean(pos_returns)), float(np.mean(neg_returns))],
        "episode_returns": pos_returns + neg_returns,
        "episode_lengths": pos_lengths + neg_lengths,
        "env_steps": int(sum(pos_lengths) + sum(neg_lengths)),
    }


def evaluate_theta(evaluator: Evaluator, theta: np.ndarray, env_seed: int, episodes: int) -> dict:
    """A pure task: ``episodes`` of the unperturbed policy; the keys of `evaluate_pair`."""
    returns, lengths = evaluator.run(theta, env_seed, episodes)
    return {
        "returns": [float(np.mean(returns))],
        "episode_returns": returns,
        "episode_lengths": lengths,
        "env_steps": int(sum(lengths)),
    }
