"""TD3's plan: SAC's plan (replay at a fixed ratio) with TD3's policy."""

from hrl_tasks.algorithms.sac.plan import SAC
from hrl_tasks.algorithms.td3.config import TD3Config
from hrl_tasks.policies.configs import TD3PolicyConfig
from hrl_tasks.policies.td3 import TD3Policy


class TD3(SAC):
    """TD3 (Fujimoto et al. 2018): deterministic actor, twin critics, delayed updates."""

    name = "td3"
    policy_class = TD3Policy
    policy_config_class = TD3PolicyConfig
    config_class = TD3Config
