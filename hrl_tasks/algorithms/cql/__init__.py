"""Conservative Q-learning (CQL on SAC), trained from recorded experience."""

from hrl_tasks.algorithms.cql.config import CQLConfig
from hrl_tasks.algorithms.cql.plan import CQL

__all__ = ["CQL", "CQLConfig"]
