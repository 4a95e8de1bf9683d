"""Spaces and fixed synthetic batches for the policy tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import ESPolicy, Policy

_CARTPOLE_HIGH = np.array([4.8, np.inf, 0.418, np.inf], np.float32)
_PENDULUM_HIGH = np.array([1.0, 1.0, 8.0], np.float32)


def cartpole_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    """CartPole-v1's observation and action spaces."""
    return gym.spaces.Box(-_CARTPOLE_HIGH, _CARTPOLE_HIGH, dtype=np.float32), gym.spaces.Discrete(2)


def pendulum_spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    """Pendulum-v1's observation and action spaces."""
    obs = gym.spaces.Box(-_PENDULUM_HIGH, _PENDULUM_HIGH, dtype=np.float32)
    return obs, gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def reward_of(obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """A learnable reward: discrete, +1 for action ``obs[0] > 0``; continuous, ``-(a - obs[0])^2``."""
    if actions.ndim == 1:
        return np.where(actions == (obs[:, 0] > 0), 1.0, -1.0).astype(np.float32)
    return -((actions[:, 0] - obs[:, 0]) ** 2).astype(np.float32)


def fragment(policy: Policy, length: int = 64, seed: int = 0) -> SampleBatch:
    """One env's fragment with every rollout column, a termination and a truncation.

    Rows ``t = length // 3`` (terminated) and ``2 * length // 3`` (truncated)
    end episodes; there ``next_obs`` is the final observation and ``obs[t + 1]``
    the next episode's first one. ``next_values`` is ``V(next_obs)`` from the
    policy (zeros if it has no value function).
    """
    rng = np.random.default_rng(seed)
    dim = policy.observation_space.shape[0]
    states = rng.normal(size=(length + 1, dim)).astype(np.float32)
    obs, next_obs = states[:-1], states[1:].copy()
    terminateds = np.zeros(length, bool)
    truncateds = np.zeros(length, bool)
    terminateds[length // 3] = True
    truncateds[2 * length // 3] = True
    done = terminateds | truncateds
    next_obs[done] = rng.normal(size=(int(done.sum()), dim)).astype(np.float32)
    actions, extras = policy.compute_actions(obs)
    try:
        next_values = policy.compute_values(next_obs)
    except NotImplementedError:
        next_values = np.zeros(length, np.float32)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: reward_of(obs, actions),
            SampleBatch.TERMINATEDS: terminateds,
            SampleBatch.TRUNCATEDS: truncateds,
            SampleBatch.NEXT_OBS: next_obs,
            SampleBatch.NEXT_VALUES: next_values,
            **extras,
        }
    )


def transitions(policy: Policy, n: int = 64, seed: int = 0) -> SampleBatch:
    """Replay-style rows with uniformly random actions (for DQN)."""
    rng = np.random.default_rng(seed)
    dim = policy.observation_space.shape[0]
    obs = rng.normal(size=(n, dim)).astype(np.float32)
    actions = rng.integers(0, policy.action_space.n, size=n)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: reward_of(obs, actions),
            SampleBatch.NEXT_OBS: rng.normal(size=(n, dim)).astype(np.float32),
            SampleBatch.TERMINATEDS: rng.random(n) < 0.2,
            SampleBatch.TRUNCATEDS: np.zeros(n, bool),
        }
    )


def imitation_loss(policy: ESPolicy, obs: np.ndarray, targets: np.ndarray) -> float:
    """Mean squared distance of the policy's deterministic actions to `targets`."""
    actions, _ = policy.compute_actions(obs)
    return float(np.mean((actions - targets) ** 2))


def es_batch(
    policy: ESPolicy, obs: np.ndarray, targets: np.ndarray, n_pairs: int, seed: int
) -> SampleBatch:
    """Evaluates antithetic perturbations of the policy on the imitation fitness."""
    theta = policy.get_flat()
    sigma = policy.config.noise_stdev
    seeds = np.random.default_rng(seed).integers(0, 2**31, size=n_pairs)
    returns = np.zeros((n_pairs, 2))
    for i, noise_seed in enumerate(seeds):
        for j, sign in enumerate((1.0, -1.0)):
            policy.set_flat(theta + sign * sigma * policy.noise(noise_seed))
            returns[i, j] = -imitation_loss(policy, obs, targets)
    policy.set_flat(theta)
    return SampleBatch({"noise_seeds": seeds, "returns": returns})
