"""Ape-X's flat config: DQN's keys, the replay shards and the asynchrony."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.dqn.config import DQNConfig


@dataclass
class ApeXConfig(DQNConfig):
    """DQN's keys plus the replay shards and asynchrony."""

    num_replay_shards: int = 2
    """Replay buffers, each in its own stateful worker."""
    num_async: int = 2
    """Requests in flight per rollout worker and per replay shard."""
    weight_sync_every: int = 16
    """Learner updates between weight broadcasts to the rollout workers."""
    replay_batches_per_call: int = 16
    """Train batches fetched from a shard in one call. Fetching a result costs the
    learner a round trip (about 6 ms here); one batch per call held it to ~35 updates/s.
    It sets how batches travel, not how many are replayed per env step: with
    ``training_intensity`` None the learner replays as fast as it can, with it a rate
    limiter holds the ratio (the samplers wait for the learner, or it for them)."""
    rollout_fragment_length: int = 16
    n_step: int = 3
    """As in the Ape-X paper; with 1-step targets CartPole peaked near 200 in 400k steps."""
    target_update_every: int = 100
    min_steps_per_report: int = 2000

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # samples come from remote workers only
        "num_replay_shards": ">= 1",
        "num_async": ">= 1",
        "weight_sync_every": ">= 1",
        "replay_batches_per_call": ">= 1",
    }

    def check(self) -> None:
        """Each shard keeps ``buffer_size // num_replay_shards`` rows (at least one) and
        replays once it holds ``learning_starts // num_replay_shards``; batches are drawn
        with replacement, so ``train_batch_size`` may exceed a shard (unlike DQN's buffer)."""
        AlgorithmConfig.check(self)  # not DQN's
        why = {
            "num_replay_shards": "a shard would have no rows",
            "learning_starts": "replay would never start",
        }
        for key, reason in why.items():
            if getattr(self, key) > self.buffer_size:
                raise ConfigError(
                    f"ApeXConfig.{key} must be <= buffer_size ({self.buffer_size}), "
                    f"got {getattr(self, key)}: {reason}"
                )
