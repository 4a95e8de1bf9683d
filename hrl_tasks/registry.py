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
    "iql": "hrl_tasks.algorithms.iql:IQL",
    "rainbow": "hrl_tasks.algorithms.rainbow:Rainbow",
}
"""Algorithm name -> ``module:Class``."""

CONFIG_PATHS: dict[str, str] = {
    "ppo": "hrl_tasks.algorithms.ppo.config:PPOConfig",
    "a2c": "hrl_tasks.algorithms.pg.config:A2CConfig",
    "a3c": "hrl_tasks.algorithms.a3c.config:A3CConfig",
    "dqn": "hrl_tasks.algorithms.dqn.config:DQNConfig",
    "impala": "hrl_tasks.algorithms.impala.config:IMPALAConfig",
    "appo": "hrl_tasks.algorithms.appo.config:APPOConfig",
    "es": "hrl_tasks.algorithms.es.config:ESConfig",
    "apex": "hrl_tasks.algorithms.apex.config:ApeXConfig",
    "sac": "hrl_tasks.algorithms.sac.config:SACConfig",
    "td3": "hrl_tasks.algorithms.td3.config:TD3Config",
    "alphazero": "hrl_tasks.algorithms.alphazero.config:AlphaZeroConfig",
    "mpc": "hrl_tasks.algorithms.mpc.config:MPCConfig",
    "composition": "hrl_tasks.algorithms.composition.config:CompositionConfig",
    "bc": "hrl_tasks.algorithms.marwil.config:BCConfig",
    "marwil": "hrl_tasks.algorithms.marwil.config:MARWILConfig",
    "cql": "hrl_tasks.algorithms.cql.config:CQLConfig",
    "iql": "hrl_tasks.algorithms.iql.config:IQLConfig",
    "rainbow": "hrl_tasks.algorithms.rainbow.config:RainbowConfig",
}
"""Algorithm name -> ``module:Class`` of its config (each algorithm's ``config_class``):
most import no torch, so a config is checked before the plan is imported."""

SERIALIZER_PATHS: tuple[str, ...] = ("hrl_tasks.data.codec:register_dask_serialization",)
"""Functions that register a layer's types with the engine's serialization
(`hrl_tasks.scheduler.serialization`): the engine calls them the first time it sends or
receives a type of the package, so that it need not import the layers above it."""


def load_object(path: str) -> Any:
    """The object at ``module:attribute``, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def algorithm_key(name: str) -> str:
    """``name`` as the registry's tables spell it (case-insensitive).

    Raises:
        ConfigError: for a name that is not an algorithm, listing those that are.
    """
    key = str(name).lower()
    if key not in ALGORITHM_PATHS:
        raise ConfigError(
            f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHM_PATHS))}"
        )
    return key


def get_algorithm(name: str) -> Any:
    """The Algorithm class called ``name`` (case-insensitive), importing only its module.

    Raises:
        ConfigError: for a name that is not an algorithm, listing those that are.
    """
    return load_object(ALGORITHM_PATHS[algorithm_key(name)])


def get_config_class(name: str) -> Any:
    """The config class of the algorithm called ``name`` (its ``config_class``),
    importing only the config's module: for most algorithms, no torch.

    Raises:
        ConfigError: for a name that is not an algorithm, listing those that are.
    """
    return load_object(CONFIG_PATHS[algorithm_key(name)])
