"""Composition: policies of different algorithms learning together in one multi-agent flow."""

from hrl_tasks.algorithms.composition.plan import Composition, CompositionConfig, composed_plan

__all__ = ["Composition", "CompositionConfig", "composed_plan"]
