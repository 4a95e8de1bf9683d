"""Rewards divided by the running standard deviation of the discounted return.

Stable-Baselines3's ``VecNormalize(norm_reward=True)``, which rl-zoo's MuJoCo
settings for PPO use: each sub-env keeps its discounted return ``R = gamma R + r``
(zero again when its episode ends), the return's running variance is updated at
every step, and each reward is divided by its standard deviation, then clipped.
A rollout worker keeps one `RewardScaler` over its sub-envs (its statistics are
its own, as each of Stable-Baselines3's ``VecNormalize`` wrappers has its own).
"""

from __future__ import annotations

import numpy as np

from hrl_tasks.data.running_stats import RunningStats


class RewardScaler:
    """Scales a fragment's rewards ``[T, N]`` step by step (see the module).

    Args:
        num_envs: Sub-envs (``N``).
        gamma: The discount of the return whose spread scales the rewards.
        clip: Scaled rewards are clipped to ``[-clip, clip]``.
        eps: Added to the variance.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self.returns = np.zeros(int(num_envs), np.float64)
        self.stats = RunningStats.empty(())

    def __call__(self, rewards: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """``rewards`` and ``ended`` (terminated or truncated) of ``T`` steps of ``N``
        sub-envs; returns the scaled rewards (float32, same shape)."""
        scaled = np.empty(rewards.shape, np.float32)
        for t in range(len(rewards)):
            self.returns = self.returns * self.gamma + rewards[t]
            self.stats = self.stats.merge(RunningStats.of(self.returns, ()))
            std = np.sqrt(self.stats.var + self.eps)
            scaled[t] = np.clip(rewards[t] / std, -self.clip, self.clip)
            self.returns[ended[t]] = 0.0
        return scaled
