"""Envs of our own: long-horizon tasks for hierarchical agents."""
