"""Composition's config: the shared keys (each policy's own go in its ``PolicySpec``)."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig


@dataclass
class CompositionConfig(AlgorithmConfig):
    """The shared keys; each policy's own keys go in its ``PolicySpec.config``."""

    min_steps_per_report: int = 1000
    """Env steps sampled per reported iteration (the sub-flows step at their own pace)."""

    BOUNDS: ClassVar[dict[str, str]] = {"min_steps_per_report": ">= 0"}
