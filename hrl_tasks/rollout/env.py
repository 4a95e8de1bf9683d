"""Env creation lives in `hrl_tasks.envs.make`; its names stay importable from here."""

from hrl_tasks.envs.make import (  # noqa: F401
    CatchEnvErrors,
    EnvError,
    EnvLike,
    MultiAgentEnvError,
    PettingZooSpec,
    SameStepVectorEnv,
    UnknownEnvError,
    env_creator,
    env_name,
    find_pettingzoo,
    make_env,
    pettingzoo_names,
    register_env,
    require_single_agent,
    resolve_env,
)
