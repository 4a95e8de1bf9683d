"""TD3's config and plan: SAC's plan (replay at a fixed ratio) with TD3's policy."""

from collections.abc import Callable
from dataclasses import dataclass

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.replay_learning import ReplayConfig
from hrl_tasks.algorithms.sac.plan import SAC
from hrl_tasks.algorithms.sharded_replay import ShardedReplayConfig
from hrl_tasks.policies.td3 import TD3Config as TD3PolicyConfig
from hrl_tasks.policies.td3 import TD3Policy


@dataclass
class TD3Config(AlgorithmConfig, ReplayConfig, ShardedReplayConfig, TD3PolicyConfig):
    """Every key of TD3; the policy keys are those of ``hrl_tasks.policies.td3.TD3Config``,
    the replay keys those of ``hrl_tasks.algorithms.replay_learning.ReplayConfig`` and
    ``hrl_tasks.algorithms.sharded_replay.ShardedReplayConfig``.

    Defaults are Stable-Baselines3's TD3: batches of 256, one critic update per env
    step (``training_intensity`` 256), learning from 100 rows on.
    """

    env: str | Callable = "Pendulum-v1"
    num_workers: int = 1
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 64
    buffer_size: int = 1_000_000
    learning_starts: int = 100
    train_batch_size: int = 256
    train_steps_per_round: int | None = None
    training_intensity: float | None = 256.0
    min_steps_per_report: int = 1000
    num_replay_shards: int = 0
    """Replay shards in stateful workers fed by the rollout workers, as Ape-X's (the
    learner replays while they sample); 0 keeps the replay in the driver, sampling and
    learning in turn."""

    def check(self) -> None:
        super().check()
        self.check_buffer()
        self.check_replay()
        self.check_shards()


class TD3(SAC):
    """TD3 (Fujimoto et al. 2018): deterministic actor, twin critics, delayed updates."""

    name = "td3"
    policy_class = TD3Policy
    policy_config_class = TD3PolicyConfig
    config_class = TD3Config
