"""Spaces as policies see them: the error for ones they cannot act in, and action masks."""

from typing import Any

import gymnasium as gym
import numpy as np


class UnsupportedSpaceError(TypeError, ValueError):
    """An observation or action space that a policy does not support.

    A ``TypeError`` (the space is of the wrong kind) and a ``ValueError`` (it is
    bad input, reported in one line by the command line).
    """


MASKED = -1e9  # an illegal action's logit or Q-value: finite, so 0 * MASKED stays 0


class MaskedBox(gym.spaces.Box):
    """A flat Box whose last ``mask_size`` entries are an action mask (1: legal)."""

    def __init__(self, low: Any, high: Any, mask_size: int, dtype: Any = np.float32) -> None:
        super().__init__(low, high, dtype=dtype)
        self.mask_size = int(mask_size)

    def __repr__(self) -> str:
        return f"MaskedBox({self.shape[0] - self.mask_size} observation + {self.mask_size} mask)"


class PlanesBox(gym.spaces.Box):
    """Channels-first planes ``(C, H, W)`` of 0s and 1s on a small grid (MinAtar's 10x10,
    `hrl_tasks.envs.minatar`), which the models read with a small CNN
    (`hrl_tasks.policies.models.SmallCNN`)."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__(0, 1, shape, np.uint8)

    def __repr__(self) -> str:
        return f"PlanesBox({self.shape[0]} planes of {self.shape[1]}x{self.shape[2]})"


class StateBox(gym.spaces.Box):
    """A flat Box: an agent's own observation (the first ``own_size`` entries), then
    the global state. Actor-critic policies act on the own part only and value the
    whole (a centralized critic, as MAPPO)."""

    def __init__(self, low: Any, high: Any, own_size: int, dtype: Any = np.float32) -> None:
        super().__init__(low, high, dtype=dtype)
        self.own_size = int(own_size)

    def __repr__(self) -> str:
        return f"StateBox({self.own_size} own + {self.shape[0] - self.own_size} state)"
