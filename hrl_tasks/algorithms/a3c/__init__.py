"""A3C: asynchronous advantage actor-critic."""

from hrl_tasks.algorithms.a3c.config import A3CConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("A3C",)})  # the plan imports torch

__all__ = ["A3C", "A3CConfig"]
