"""The multi-agent env interface lives in `hrl_tasks.envs.multi_agent`; its names stay
importable from here."""

from hrl_tasks.envs.multi_agent import (  # noqa: F401
    ALL,
    CentralCritic,
    CentralCriticEnv,
    MultiAgentEnv,
    ParallelEnvAdapter,
    TurnBasedEnvAdapter,
    as_multi_agent_env,
    is_multi_agent,
    make_multi_agent_env,
)
