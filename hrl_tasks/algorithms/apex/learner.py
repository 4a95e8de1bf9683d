"""Ape-X's learner in a process of its own (``num_learners=1``): it replays what the
shards hand it, and no batch passes through the driver.

The driver asks a shard for a group of prioritized batches and keeps the answer on
the shard's worker (a kept direct call); it gives that TaskRef to the learner's
`ReplayLearner.learn`, whose worker fetches the group from the shard's. The learner
takes one update per ``train_batch_size`` rows, moves its target network every
``target_update_every`` updates, and replies with what the driver counts and the
group's new priorities (16 bytes a row), which the driver sends to their shard in
one call. Every ``broadcast_interval`` updates the reply carries the weights too,
for each rollout worker's next sample call (`RemoteLearner`, which also keeps the
learner's state for re-creating it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.rollout.async_learner import LearnerWorker, build_learner_policy

PRIORITY_FLOOR = 1e-6
"""Added to each |TD error|: no row's priority is zero."""


def priorities_of(info: dict) -> np.ndarray:
    """A DQN update's new priorities: |TD error| + `PRIORITY_FLOOR`, per row."""
    return np.abs(np.asarray(info["td_error"], dtype=np.float64)) + PRIORITY_FLOOR


class ReplayLearner(LearnerWorker):
    """A stateful worker: a DQN policy that learns on the replayed groups given to `learn`.

    Args:
        policy_class, observation_space, action_space, config: build the policy.
        state: its ``get_state()`` to start from.
        train_batch_size: rows per update.
        target_update_every: updates between two moves of the target network.
        broadcast_interval: updates between two replies that carry the weights.
        num_threads: torch threads of the process.
    """

    def __init__(
        self,
        policy_class,
        observation_space,
        action_space,
        config,
        state=None,
        train_batch_size: int = 64,
        target_update_every: int = 100,
        broadcast_interval: int = 16,
        num_threads: int = 1,
    ):
        self.policy = build_learner_policy(
            policy_class, observation_space, action_space, config, state, num_threads
        )
        self.lock = threading.Lock()
        self.train_batch_size = int(train_batch_size)
        self.target_update_every = int(target_update_every)
        self.broadcast_interval = int(broadcast_interval)
        self.version = 0  # updates taken
        self.sent_version = 0  # the version whose weights the last reply carried

    def learn(self, group: SampleBatch | None) -> dict[str, Any]:
        """One update per ``train_batch_size`` rows of a shard's group (None: the shard
        had too few rows yet).

        Returns:
            ``trained`` (rows), ``updates``, ``target_updates``, ``learn_s``,
            ``version`` (updates taken in all), ``info`` (the latest update's
            scalars), ``indexes`` and ``priorities`` (the group's rows in its shard,
            and their new priorities), and ``weights`` once ``broadcast_interval``
            updates were taken since the last reply that carried them.
        """
        reply: dict[str, Any] = {"trained": 0, "updates": 0, "target_updates": 0, "info": {}}
        indexes, priorities = [], []
        start = time.perf_counter()
        with self.lock:
            size = self.train_batch_size
            for first in range(0, 0 if group is None else len(group), size):
                batch = group[first : first + size]
                info = self.policy.learn_on_batch(batch)
                indexes.append(batch["batch_indexes"])
                priorities.append(priorities_of(info))
                self.version += 1
                if self.version % self.target_update_every == 0:
                    self.policy.update_target()
                    reply["target_updates"] += 1
                reply["trained"] += len(batch)
                reply["updates"] += 1
                reply["info"] = {k: float(v) for k, v in info.items() if np.ndim(v) == 0}
            if indexes:
                reply["indexes"] = np.concatenate(indexes)
                reply["priorities"] = np.concatenate(priorities)
            reply["version"] = self.version
            if self.version >= self.sent_version + self.broadcast_interval:
                reply["weights"] = self.policy.get_weights()
                self.sent_version = self.version
        reply["learn_s"] = time.perf_counter() - start
        return reply
