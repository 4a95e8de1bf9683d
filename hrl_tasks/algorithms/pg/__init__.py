"""A2C (synchronous advantage actor-critic) and vanilla policy gradient."""

from hrl_tasks.algorithms.pg.config import A2CConfig
from hrl_tasks.algorithms.pg.plan import A2C

__all__ = ["A2C", "A2CConfig"]
