"""A prioritized replay buffer living in a stateful worker: one shard of Ape-X's replay."""

from __future__ import annotations

from hrl_tasks.data import PrioritizedReplayBuffer, SampleBatch


class ReplayShard:
    """Rollout workers' batches go in (worker to worker), the learner's samples come out.

    Args:
        capacity: rows kept.
        alpha: how strongly priorities shape sampling.
        beta: importance-sampling correction.
        learning_starts: rows before ``sample`` returns batches.
        seed: sampling seed.
    """

    def __init__(self, capacity: int, alpha: float, beta: float, learning_starts: int, seed):
        self.buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, seed=seed)
        self.learning_starts = learning_starts
        self.added = 0

    def add_sample(self, sample: tuple[SampleBatch, dict]) -> dict:
        """Store a rollout worker's ``(batch, metrics)``; returns the metrics (small) for the driver."""
        batch, metrics = sample
        self.buffer.add(batch)
        self.added += len(batch)
        return metrics

    def sample(self, n: int) -> SampleBatch | None:
        """A prioritized batch of ``n`` rows (drawn with replacement), or None until
        ``learning_starts`` rows arrived."""
        if len(self.buffer) < max(1, self.learning_starts):
            return None
        return self.buffer.sample(n)

    def update_priorities(self, indexes, priorities) -> None:
        self.buffer.update_priorities(indexes, priorities)

    def size(self) -> int:
        return len(self.buffer)
