"""A3C: asynchronous advantage actor-critic."""

from hrl_tasks.algorithms.a3c.plan import A3C, A3CConfig

__all__ = ["A3C", "A3CConfig"]
