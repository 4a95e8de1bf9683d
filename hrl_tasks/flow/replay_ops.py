"""Replay operators: storing experience, replaying it, and keeping targets and priorities fresh."""

from __future__ import annotations

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.flow.context import FlowContext
from hrl_tasks.flow.iterators import LocalIterator


class StoreToReplayBuffer:
    """Add each batch to a replay buffer in the driver; yields the batch unchanged."""

    def __init__(self, buffer):
        self.buffer = buffer

    def __call__(self, batch: SampleBatch) -> SampleBatch:
        self.buffer.add(batch)
        return batch


def Replay(buffer, batch_size: int, learning_starts: int = 0) -> LocalIterator:
    """Batches of ``batch_size`` rows sampled from ``buffer``, once it holds ``learning_starts`` rows.

    Before that it yields ``None`` (consumers skip it), so a plan that
    alternates storing and replaying keeps sampling until learning can start.
    """

    def batches():
        while True:
            if len(buffer) < max(learning_starts, batch_size):
                yield None
            else:
                yield buffer.sample(batch_size)

    return LocalIterator(batches(), "Replay")


class UpdatePriorities:
    """Give the replayed rows new priorities from the learner's TD errors (prioritized replay)."""

    def __init__(self, buffer, eps: float = 1e-6):
        self.buffer = buffer
        self.eps = eps

    def __call__(self, item):
        batch, info = item
        if SampleBatch.BATCH_INDEXES in batch.columns and "td_error" in info:
            priorities = np.abs(np.asarray(info["td_error"], dtype=np.float64)) + self.eps
            self.buffer.update_priorities(batch[SampleBatch.BATCH_INDEXES], priorities)
        return item


class UpdateTargetNetwork:
    """Move the target network toward the online one every ``every_updates`` learner updates."""

    def __init__(self, workers, ctx: FlowContext, every_updates: int, policy_id=None):
        if every_updates < 1:
            raise ValueError(f"every_updates must be >= 1, got {every_updates}")
        self.policy_id = policy_id  # multi-agent: the policy of the PolicyMap
        self.workers = workers
        self.ctx = ctx
        self.every_updates = every_updates
        self.updates = 0

    def __call__(self, item):
        self.updates += 1
        if self.updates % self.every_updates == 0:
            policy = self.workers.local_worker.policy
            policy = policy if self.policy_id is None else policy[self.policy_id]
            policy.update_target()
            self.ctx.counters["target_updates"] += 1
        return item


class SetEpsilon:
    """Picklable: sets a DQN policy's exploration epsilon on a rollout worker (of the
    policy ``policy_id`` of its PolicyMap, in multi-agent runs)."""

    def __init__(self, epsilon: float, policy_id=None):
        self.epsilon = float(epsilon)
        self.policy_id = policy_id

    def __call__(self, worker):
        policy = worker.policy if self.policy_id is None else worker.policy[self.policy_id]
        policy.set_epsilon(self.epsilon)
        return self.epsilon


def linear_schedule(start: float, end: float, over_steps: int, steps: int) -> float:
    """``start`` moving linearly to ``end`` over ``over_steps``, then ``end``."""
    if over_steps <= 0:
        return end
    if steps >= over_steps:
        return end
    return start + (steps / over_steps) * (end - start)
