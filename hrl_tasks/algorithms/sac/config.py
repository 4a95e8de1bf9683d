"""SAC's flat config: shared keys, the policy's keys and the replay keys."""

from dataclasses import dataclass

from hrl_tasks.algorithms.sharded_replay_config import ContinuousReplayConfig
from hrl_tasks.policies.configs import SACPolicyConfig


@dataclass
class SACConfig(ContinuousReplayConfig, SACPolicyConfig):
    """Every key of SAC; the policy keys are those of ``hrl_tasks.policies.sac.SACConfig``,
    the others those of ``hrl_tasks.algorithms.sharded_replay.ContinuousReplayConfig``
    (Stable-Baselines3's defaults)."""
