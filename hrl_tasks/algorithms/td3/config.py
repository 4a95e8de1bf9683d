"""TD3's flat config: the continuous replay keys and TD3's policy keys."""

from dataclasses import dataclass

from hrl_tasks.algorithms.sharded_replay_config import ContinuousReplayConfig
from hrl_tasks.policies.configs import TD3PolicyConfig


@dataclass
class TD3Config(ContinuousReplayConfig, TD3PolicyConfig):
    """Every key of TD3; the policy keys are those of ``hrl_tasks.policies.TD3PolicyConfig``,
    the others those of ``hrl_tasks.algorithms.sharded_replay.ContinuousReplayConfig``
    (Stable-Baselines3's defaults: one critic update of 256 rows per env step)."""
