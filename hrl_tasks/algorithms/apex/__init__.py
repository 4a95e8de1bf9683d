"""Ape-X: distributed prioritized experience replay."""

from hrl_tasks.algorithms.apex.plan import ApeX, ApeXConfig, ReplayShard

__all__ = ["ApeX", "ApeXConfig", "ReplayShard"]
