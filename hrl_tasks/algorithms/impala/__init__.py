"""IMPALA: asynchronous sampling, a learner thread in the driver, V-trace off-policy correction."""

from hrl_tasks.algorithms.impala.config import IMPALAConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("IMPALA",)})  # the plan imports torch

__all__ = ["IMPALA", "IMPALAConfig"]
