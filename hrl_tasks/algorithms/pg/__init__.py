"""A2C (synchronous advantage actor-critic) and vanilla policy gradient."""

from hrl_tasks.algorithms.pg.config import A2CConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("A2C",)})  # the plan imports torch

__all__ = ["A2C", "A2CConfig"]
