"""APPO: IMPALA's asynchronous sampling and learner thread, PPO's clipped surrogate on V-trace."""

from hrl_tasks.algorithms.appo.config import APPOConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("APPO",)})  # the plan imports torch

__all__ = ["APPO", "APPOConfig"]
