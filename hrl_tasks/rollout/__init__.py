"""Rollouts: env creation, `RolloutWorker` (a vector env plus a policy copy) and `WorkerSet`."""

from hrl_tasks.rollout.env import (
    CatchEnvErrors,
    EnvError,
    MultiAgentEnvError,
    PettingZooSpec,
    UnknownEnvError,
    env_creator,
    env_name,
    make_env,
    register_env,
    require_single_agent,
    resolve_env,
)
from hrl_tasks.rollout.worker import RolloutWorker, derive_seed
from hrl_tasks.rollout.worker_set import WorkerSet

__all__ = [
    "CatchEnvErrors",
    "EnvError",
    "MultiAgentEnvError",
    "PettingZooSpec",
    "RolloutWorker",
    "UnknownEnvError",
    "WorkerSet",
    "derive_seed",
    "env_creator",
    "env_name",
    "make_env",
    "register_env",
    "require_single_agent",
    "resolve_env",
]
