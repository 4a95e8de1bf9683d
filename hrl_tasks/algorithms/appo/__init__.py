"""APPO: IMPALA's asynchronous sampling and learner thread, PPO's clipped surrogate on V-trace."""

from hrl_tasks.algorithms.appo.config import APPOConfig
from hrl_tasks.algorithms.appo.plan import APPO

__all__ = ["APPO", "APPOConfig"]
