"""The keys of distributed replay (`sharded_replay`), with no torch and no engine: a
config is checked before any cluster starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.replay_learning import ReplayConfig


@dataclass
class ShardedReplayConfig:
    """The keys of distributed replay."""

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

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_replay_shards": ">= 0",
        "num_async": ">= 1",
        "weight_sync_every": ">= 1",
        "replay_batches_per_call": ">= 1",
    }

    def check_shards(self) -> None:
        """Each shard keeps ``buffer_size // num_replay_shards`` rows (at least one) and
        replays once it holds ``learning_starts // num_replay_shards``; batches are drawn
        with replacement, so ``train_batch_size`` may exceed a shard. Samples come from
        remote rollout workers only."""
        owner = type(self).__name__
        why = {
            "num_replay_shards": "a shard would have no rows",
            "learning_starts": "replay would never start",
        }
        for key, reason in why.items():
            if getattr(self, key) > self.buffer_size:
                raise ConfigError(
                    f"{owner}.{key} must be <= buffer_size ({self.buffer_size}), "
                    f"got {getattr(self, key)}: {reason}"
                )
        if self.num_replay_shards and self.num_workers < 1:
            raise ConfigError(
                f"{owner}.num_workers must be >= 1 with replay shards (num_replay_shards="
                f"{self.num_replay_shards}): the shards are fed by remote rollout workers"
            )


def with_shard_processes(cluster: dict[str, int], shards: int) -> dict[str, int]:
    """The embedded cluster ``cluster`` (`AlgorithmConfig.embedded_cluster`) with a
    worker process more per replay shard: the shards are created after the rollout
    workers and spread, so each lands in a process of its own, and a rollout worker's
    death loses no replay. Measured beside the rollout workers (2 threads a process)
    against apart (1 thread), Ape-X with 2 rollout workers sampled and trained the
    same (0.99x, 1.01x; docs/benchmarks.md, 2026-12-01). Pure."""
    return {**cluster, "n_workers": cluster["n_workers"] + shards}


@dataclass
class ContinuousReplayConfig(AlgorithmConfig, ReplayConfig, ShardedReplayConfig):
    """The keys SAC and TD3 share, with Stable-Baselines3's defaults: a replay of a
    million rows, batches of 256, one gradient step per env step (``training_intensity``
    256), learning from 100 rows on (uniform random actions before). One rollout worker
    with one env: the learner, not sampling, sets the pace."""

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
    learner_threads: int | None = None
    """torch's threads of the driver's learner; None: torch's default, a thread per
    core. The rollout worker waits while the driver learns (unless replay shards), so
    the update has the cores: TD3 on HalfCheetah ran 40,000 steps in 231 s on two
    threads against 381 s on one (docs/learning.md)."""
    num_replay_shards: int = 0
    """Replay shards in stateful workers fed by the rollout workers, as Ape-X's (the
    learner replays while they sample); 0 keeps the replay in the driver, sampling and
    learning in turn."""

    def embedded_cluster(self) -> dict[str, int]:
        """A process per rollout worker and one per replay shard (`with_shard_processes`)."""
        return with_shard_processes(super().embedded_cluster(), self.num_replay_shards)

    def check(self) -> None:
        super().check()
        self.check_buffer()
        self.check_replay()
        self.check_shards()
