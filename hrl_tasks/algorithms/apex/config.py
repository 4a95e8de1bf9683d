"""Ape-X's flat config: DQN's keys, the replay shards and the asynchrony."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.algorithms.sharded_replay_config import ShardedReplayConfig, with_shard_processes


@dataclass
class ApeXConfig(DQNConfig, ShardedReplayConfig):
    """DQN's keys plus the replay shards and asynchrony
    (``hrl_tasks.algorithms.sharded_replay.ShardedReplayConfig``)."""

    prioritized_replay: bool = True
    """The shards sample by TD error, as in the Ape-X paper (False: uniformly)."""
    rollout_fragment_length: int = 64
    """Steps per env in one sample call (256 rows with 4 envs). Fewer, larger calls cost
    the samplers less per step: 64 sampled 1.7x the steps per second of 16 at
    `bench/throughput.py`'s settings, and at `bench/learning.py`'s CartPole settings
    (the replay ratio held at 4) six seeds of six solved in a median of 120k env steps
    against 171k (docs/benchmarks.md, 2026-12-01). The Ape-X paper's actors and RLlib's
    send 50."""
    n_step: int = 3
    """As in the Ape-X paper; with 1-step targets CartPole peaked near 200 in 400k steps."""
    target_update_every: int = 100
    min_steps_per_report: int = 2000
    num_learners: int = 1
    """1 (the default): a learner in a process of its own
    (`hrl_tasks.algorithms.apex.learner`): each group of replayed batches goes from its
    shard to the learner, and each sampled batch from its rollout worker to a shard,
    the driver passing references (needs ``direct_calls``); the learner's weights come
    back with its replies every ``weight_sync_every`` updates. 0: the driver learns,
    every replayed batch passing through its process. On this project's 2-core
    machine the learner apart trained 1.06x the rows per second with 0.28x the
    driver's CPU, sampled 0.94x the env steps, and six CartPole seeds of six solved in
    a median of 130k env steps and 23 s against 182k and 34 s (docs/benchmarks.md,
    2026-12-02)."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # samples come from remote workers only
        "num_replay_shards": ">= 1",
    }

    def embedded_cluster(self) -> dict[str, int]:
        """A process per rollout worker and one per replay shard (`with_shard_processes`)."""
        return with_shard_processes(super().embedded_cluster(), self.num_replay_shards)

    def check(self) -> None:
        AlgorithmConfig.check(self)  # not DQN's: train_steps_per_round is not Ape-X's pace
        self.check_shards()
        self.check_support()
        if self.num_learners > 1:
            raise ConfigError(
                "ApeXConfig.num_learners must be 0 (the driver learns) or 1 (a learner "
                "process of its own replays from the shards), got "
                f"{self.num_learners}"
            )
        if self.num_learners == 1 and not self.direct_calls:
            raise ConfigError(
                "ApeXConfig.direct_calls must be True with num_learners=1 (the default): "
                "replayed batches go from the shards to the learner only on direct calls; "
                "with direct_calls=False set num_learners=0 (the driver learns)"
            )
