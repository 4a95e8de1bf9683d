"""Where each algorithm lives, by the name users type: read without importing any of them,
so that the command line's help and usage errors stay quick (no torch, no distributed).

`get_algorithm` imports only the algorithm it is asked for, so any layer may look an
algorithm up by name (a checkpoint's, a policy spec's) without importing them all. The
engine finds the codecs of the layers above it here too.
"""

from __future__ import annotations

import importlib
from typing import Any

from hrl_tasks.errors import ConfigError

ALGORITHM_PATHS: dict[str, str] = {
    "ppo": "hrl_tasks.algorithms.ppo:PPO",
    "a2c": "hrl_tasks.algorithms.pg:A2C",
    "a3c": "hrl_tasks.algorithms.a3c:A3C",
    "dqn": "hrl_tasks.algorithms.dqn:DQN",
    "impala": "hrl_tasks.algorithms.impala:IMPALA",
    "appo": "hrl_tasks.algorithms.appo:APPO",
    "es": "hrl_tasks.algorithms.es:ES",
    "apex": "hrl_tasks.algorithms.apex:ApeX",
    "sac": "hrl_tasks.algorithms.sac:SAC",
    "td3": "hrl_tasks.algorithms.td3:TD3",
    "alphazero": "hrl_tasks.algorithms.alphazero:AlphaZero",
    "mpc": "hrl_tasks.algorithms.mpc:MPC",
    "composition": "hrl_tasks.algorithms.composition:Composition",
    "bc": "hrl_tasks.algorithms.marwil:BC",
    "marwil": "hrl_tasks.algorithms.marwil:MARWIL",
    "cql": "hrl_tasks.algorithms.cql:CQL",
}
"""Algorithm name -> ``module:Class``."""

SERIALIZER_PATHS: tuple[str, ...] = ("hrl_tasks.data.codec:register_dask_serialization",)
"""Functions that register a layer's types with the engine's serialization
(`hrl_tasks.scheduler.serialization`): the engine calls them the first time it sends or
receives a type of the package, so that it need not import the layers above it."""


def load_object(path: str) -> Any:
    """The object at ``module:attribute``, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def get_algorithm(name: str) -> Any:
    """The Algorithm class called ``name`` (case-insensitive), importing only its module.

    Raises:
        ConfigError: for a name that is not an algorithm, listing those that are.
    """
    try:
        path = ALGORITHM_PATHS[str(name).lower()]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHM_PATHS))}"
        ) from None
    return load_object(path)
