"""Implicit Q-learning (IQL), trained from recorded experience."""

from hrl_tasks.algorithms.iql.config import IQLConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("IQL",)})  # the plan imports torch

__all__ = ["IQL", "IQLConfig"]
