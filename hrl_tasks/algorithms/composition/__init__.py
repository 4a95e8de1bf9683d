"""Composition: policies of different algorithms learning together in one multi-agent flow."""

from hrl_tasks.algorithms.composition.config import CompositionConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("Composition", "composed_plan")})

__all__ = ["Composition", "CompositionConfig", "composed_plan"]
