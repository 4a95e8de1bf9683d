"""TD3's config and plan: SAC's plan (replay at a fixed ratio) with TD3's policy."""

from dataclasses import dataclass

from hrl_tasks.algorithms.sac.plan import SAC
from hrl_tasks.algorithms.sharded_replay import ContinuousReplayConfig
from hrl_tasks.policies.configs import TD3PolicyConfig
from hrl_tasks.policies.td3 import TD3Policy


@dataclass
class TD3Config(ContinuousReplayConfig, TD3PolicyConfig):
    """Every key of TD3; the policy keys are those of ``hrl_tasks.policies.td3.TD3Config``,
    the others those of ``hrl_tasks.algorithms.sharded_replay.ContinuousReplayConfig``
    (Stable-Baselines3's defaults: one critic update of 256 rows per env step)."""


class TD3(SAC):
    """TD3 (Fujimoto et al. 2018): deterministic actor, twin critics, delayed updates."""

    name = "td3"
    policy_class = TD3Policy
    policy_config_class = TD3PolicyConfig
    config_class = TD3Config
