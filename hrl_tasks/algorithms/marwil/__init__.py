"""MARWIL and behaviour cloning, trained from recorded experience."""

from hrl_tasks.algorithms.marwil.config import BCConfig, MARWILConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "plan": (
            "BC",
            "MARWIL",
        )
    },
)  # the plan imports torch

__all__ = ["BC", "BCConfig", "MARWIL", "MARWILConfig"]
