"""SAC's flat config: shared keys, the policy's keys and the replay keys."""

from collections.abc import Callable
from dataclasses import dataclass

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.replay_learning import ReplayConfig
from hrl_tasks.algorithms.sharded_replay import ShardedReplayConfig
from hrl_tasks.policies.sac import SACConfig as SACPolicyConfig


@dataclass
class SACConfig(AlgorithmConfig, ReplayConfig, ShardedReplayConfig, SACPolicyConfig):
    """Every key of SAC; the policy keys are those of ``hrl_tasks.policies.sac.SACConfig``,
    the replay keys those of ``hrl_tasks.algorithms.replay_learning.ReplayConfig`` and
    ``hrl_tasks.algorithms.sharded_replay.ShardedReplayConfig``.

    Defaults are Stable-Baselines3's SAC: a replay of a million rows, batches of 256,
    one gradient step per env step (``training_intensity`` 256), learning from 100
    rows on (uniform random actions before). One rollout worker with one env: the
    learner, not sampling, sets the pace.
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
