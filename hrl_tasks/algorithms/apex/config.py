"""Ape-X's flat config: DQN's keys, the replay shards and the asynchrony."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.algorithms.sharded_replay import ShardedReplayConfig


@dataclass
class ApeXConfig(DQNConfig, ShardedReplayConfig):
    """DQN's keys plus the replay shards and asynchrony
    (``hrl_tasks.algorithms.sharded_replay.ShardedReplayConfig``)."""

    prioritized_replay: bool = True
    """The shards sample by TD error, as in the Ape-X paper (False: uniformly)."""
    rollout_fragment_length: int = 16
    n_step: int = 3
    """As in the Ape-X paper; with 1-step targets CartPole peaked near 200 in 400k steps."""
    target_update_every: int = 100
    min_steps_per_report: int = 2000

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # samples come from remote workers only
        "num_replay_shards": ">= 1",
    }

    def check(self) -> None:
        AlgorithmConfig.check(self)  # not DQN's: train_steps_per_round is not Ape-X's pace
        self.check_shards()
