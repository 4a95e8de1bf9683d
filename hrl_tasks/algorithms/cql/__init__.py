"""Conservative Q-learning (CQL on SAC), trained from recorded experience."""

from hrl_tasks.algorithms.cql.config import CQLConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("CQL",)})  # the plan imports torch

__all__ = ["CQL", "CQLConfig"]
