"""SAC: soft actor-critic with twin Q and a tuned temperature, Box and Discrete actions."""

from hrl_tasks.algorithms.sac.config import SACConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("SAC",)})  # the plan imports torch

__all__ = ["SAC", "SACConfig"]
