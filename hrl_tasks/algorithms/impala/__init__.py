"""IMPALA: asynchronous sampling, a learner thread in the driver, V-trace off-policy correction."""

from hrl_tasks.algorithms.impala.config import IMPALAConfig
from hrl_tasks.algorithms.impala.plan import IMPALA

__all__ = ["IMPALA", "IMPALAConfig"]
