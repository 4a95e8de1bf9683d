"""TD3: twin delayed deep deterministic policy gradient, Box actions."""

from hrl_tasks.algorithms.td3.config import TD3Config
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("TD3",)})  # the plan imports torch

__all__ = ["TD3", "TD3Config"]
