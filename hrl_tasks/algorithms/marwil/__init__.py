"""MARWIL and behaviour cloning, trained from recorded experience."""

from hrl_tasks.algorithms.marwil.config import BCConfig, MARWILConfig
from hrl_tasks.algorithms.marwil.plan import BC, MARWIL

__all__ = ["BC", "BCConfig", "MARWIL", "MARWILConfig"]
