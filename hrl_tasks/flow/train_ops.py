"""Operators that learn: RLlib Flow's train ops."""

from __future__ import annotations

import numpy as np

from hrl_tasks.flow.context import STEPS_SAMPLED, STEPS_TRAINED, FlowContext


class TrainOneStep:
    """Learn on the batch with the driver's policy, then broadcast the new weights once.

    Yields ``(batch, learner info)``.

    Args:
        workers: the ``WorkerSet``.
        ctx: the plan's metrics context.
        sync_weights: broadcast after each step (off when the plan syncs itself,
            e.g. once per sampling round in DQN).
        defer_sync: let the weights ride on each worker's next sample call
            (``WorkerSet.sync_weights(defer=True)``): for plans whose workers
            only sample through ``ParallelRollouts``, one task less per worker.
    """

    def __init__(
        self, workers, ctx: FlowContext, sync_weights: bool = True, defer_sync: bool = False
    ):
        self.workers = workers
        self.ctx = ctx
        self.sync_weights = sync_weights
        self.defer_sync = defer_sync

    def __call__(self, batch):
        with self.ctx.timer("learn"):
            info = self.workers.learner.learn_on_batch(batch)
        self.ctx.counters[STEPS_TRAINED] += batch.env_steps()
        self.ctx.info.update({k: float(v) for k, v in info.items() if np.ndim(v) == 0})
        if self.sync_weights:
            with self.ctx.timer("sync_weights"):
                self.workers.sync_weights(defer=self.defer_sync)
        return batch, info


class ComputeGradients:
    """On a rollout worker: the gradients of its policy on a batch (for ``ParallelRollouts(mode="raw").for_each``).

    Returns ``(grads, info, env_steps)``; runs where the batch is, so only
    gradients travel.
    """

    def __call__(self, worker, item):
        batch, metrics = item
        grads, info = worker.policy.compute_gradients(batch)
        return grads, info, batch.env_steps(), metrics


class AverageGradients:
    """Average a list of gradient results (from ``gather_sync``) into one."""

    def __call__(self, results: list):
        grads = [r[0] for r in results]
        mean = [np.mean([g[i] for g in grads], axis=0) for i in range(len(grads[0]))]
        info = {k: float(np.mean([r[1][k] for r in results])) for k in results[0][1]}
        steps = sum(r[2] for r in results)
        metrics = {
            "episode_returns": [x for r in results for x in r[3].get("episode_returns", [])],
            "episode_lengths": [x for r in results for x in r[3].get("episode_lengths", [])],
        }
        return mean, info, steps, metrics


class ApplyGradients:
    """Apply gradients in the driver and send the new weights.

    Args:
        workers: the ``WorkerSet``.
        ctx: the plan's metrics context.
        update_all: send the weights to every worker (synchronous plans) or only
            to the worker the gradients came from (A3C); for the latter, feed
            ``(worker handle, gradient result)`` pairs from ``zip_with_source_actor``.
    """

    def __init__(self, workers, ctx: FlowContext, update_all: bool = True):
        self.workers = workers
        self.ctx = ctx
        self.update_all = update_all

    def __call__(self, item):
        source, result = (None, item) if self.update_all else item
        grads, info, steps, metrics = result
        self.ctx.add_episodes(metrics)
        self.ctx.counters["env_steps_sampled"] += steps
        with self.ctx.timer("apply"):
            self.workers.local_worker.policy.apply_gradients(grads)
        self.ctx.counters[STEPS_TRAINED] += steps
        self.ctx.info = {k: float(v) for k, v in info.items() if np.ndim(v) == 0}
        with self.ctx.timer("sync_weights"):
            if self.update_all:
                self.workers.sync_weights()
            else:
                self.workers.sync_weights(to=[source])
        return info


class FeedLearner:
    """``(source, TaskRef of a kept item)`` -> the `RemoteLearner`'s replies, each
    counted: steps sampled and trained, episodes, learner steps, its latest info.
    Use with ``.combine()``. (IMPALA's and APPO's samples, A3C's gradients.)"""

    def __init__(self, learner, ctx: FlowContext):
        self.learner = learner
        self.ctx = ctx

    def __call__(self, item) -> list[dict]:
        source, item_ref = item
        replies = self.learner.add(item_ref, source)
        ctx = self.ctx
        for reply in replies:
            ctx.counters[STEPS_SAMPLED] += reply["sampled"]
            ctx.add_episodes(reply["metrics"])
            ctx.counters["env_errors"] += int(reply["metrics"].get("env_errors", 0))
            ctx.counters[STEPS_TRAINED] += reply["trained"]
            ctx.counters["learner_steps"] += reply["updates"]
            ctx.timers["learn"] += reply["learn_s"]
            if reply["info"]:
                ctx.info = dict(reply["info"])
            ctx.info["learner_queue_size"] = reply["queued"]
            ctx.info["learner_steps"] = ctx.counters["learner_steps"]
        return replies
