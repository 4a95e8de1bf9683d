"""Small deterministic envs for the rollout tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ChainEnv(gym.Env):
    """Observation ``[t]`` (the step count), reward 1 per step, two actions that do nothing.

    Args:
        terminate_at: End the episode by termination after this many steps (None: never).
        fail_at: Raise in ``step`` on the env's ``fail_at``-th step call overall (once).
    """

    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, terminate_at: int | None = None, fail_at: int | None = None) -> None:
        self.terminate_at = terminate_at
        self.fail_at = fail_at
        self.calls = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"simulated env crash on step call {self.calls}")
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), 1.0, terminated, False, {}


class BadOutputEnv(ChainEnv):
    """A `ChainEnv` that returns ``value`` as its reward or observation at step ``at``."""

    def __init__(self, at: int, value: float = float("nan"), where: str = "reward") -> None:
        super().__init__()
        self.at, self.value, self.where = at, value, where

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t == self.at:
            if self.where == "reward":
                reward = self.value
            else:
                obs = np.full_like(obs, self.value)
        return obs, reward, terminated, truncated, info


class WrongShapeEnv(ChainEnv):
    """Says its observations have shape (2,), returns shape (1,)."""

    observation_space = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)


class RecordActions(gym.Wrapper):
    """Keeps every action the env received in ``self.received``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.received: list = []

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        return self.env.step(action)


class Tag:
    """Picklable worker setup: marks a RolloutWorker with ``value``."""

    def __init__(self, value):
        self.value = value

    def __call__(self, worker):
        worker.tag = self.value
        return self.value

    @staticmethod
    def read(worker):
        return getattr(worker, "tag", None)
