"""DQN: double, dueling, n-step, prioritized replay."""

from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("DQN",)})  # the plan imports torch

__all__ = ["DQN", "DQNConfig"]
