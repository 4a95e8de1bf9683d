"""Where each algorithm lives, by the name users type: read without importing any of them,
so that the command line's help and usage errors stay quick (no torch, no distributed)."""

from __future__ import annotations

import importlib

ALGORITHM_PATHS: dict[str, str] = {
    "ppo": "hrl_tasks.algorithms.ppo:PPO",
    "a2c": "hrl_tasks.algorithms.pg:A2C",
    "a3c": "hrl_tasks.algorithms.a3c:A3C",
    "dqn": "hrl_tasks.algorithms.dqn:DQN",
    "impala": "hrl_tasks.algorithms.impala:IMPALA",
    "appo": "hrl_tasks.algorithms.appo:APPO",
    "es": "hrl_tasks.algorithms.es:ES",
    "apex": "hrl_tasks.algorithms.apex:ApeX",
    "alphazero": "hrl_tasks.algorithms.alphazero:AlphaZero",
    "mpc": "hrl_tasks.algorithms.mpc:MPC",
    "composition": "hrl_tasks.algorithms.composition:Composition",
}
"""Algorithm name -> ``module:Class``."""


def load_object(path: str):
    """The object at ``module:attribute``, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
