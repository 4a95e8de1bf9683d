"""A3C's flat config: A2C's keys and the gradient requests in flight."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.pg.config import A2CConfig


@dataclass
class A3CConfig(A2CConfig):
    """A2C's keys; ``num_async`` gradient requests are kept in flight per worker."""

    num_async: int = 1
    """Gradient requests in flight per worker."""
    min_steps_per_report: int = 256
    """Env steps per train() iteration."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # gradients come from remote workers only
        "num_async": ">= 1",
        "min_steps_per_report": ">= 0",
    }
