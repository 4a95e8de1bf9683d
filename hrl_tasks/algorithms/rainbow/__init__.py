"""Rainbow: DQN with all of its parts on (Hessel et al. 2018)."""

from hrl_tasks.algorithms.rainbow.config import RainbowConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("Rainbow",)})  # the plan imports torch

__all__ = ["Rainbow", "RainbowConfig"]
