"""Environments: the one home of env construction, and envs of our own.

* `hrl_tasks.envs.make`: how an env argument becomes an env (gymnasium ids,
  ``module:Id``, registered names, PettingZoo games, callables, ``ALE/`` ids),
  `make_env`'s vector env, and the errors that name a wrong env;
* `hrl_tasks.envs.multi_agent`: the `MultiAgentEnv` interface and its adapters for
  PettingZoo's ``ParallelEnv`` and ``AECEnv``;
* `hrl_tasks.envs.atari`: Atari's standard wrappers;
* `hrl_tasks.envs.rooms`: long-horizon tasks for hierarchical agents.

This package sits below ``rollout``: rollout workers, planners and algorithms all
make their envs here.
"""

from hrl_tasks.envs.make import (
    CatchEnvErrors,
    EnvError,
    EnvLike,
    MultiAgentEnvError,
    PettingZooSpec,
    UnknownEnvError,
    UntrustedEnvError,
    check_env_from_file,
    env_creator,
    env_name,
    make_env,
    register_env,
    require_single_agent,
    resolve_env,
)
from hrl_tasks.envs.multi_agent import MultiAgentEnv, is_multi_agent, make_multi_agent_env

__all__ = [
    "CatchEnvErrors",
    "EnvError",
    "EnvLike",
    "MultiAgentEnv",
    "MultiAgentEnvError",
    "PettingZooSpec",
    "UnknownEnvError",
    "UntrustedEnvError",
    "check_env_from_file",
    "env_creator",
    "env_name",
    "is_multi_agent",
    "make_env",
    "make_multi_agent_env",
    "register_env",
    "require_single_agent",
    "resolve_env",
]
