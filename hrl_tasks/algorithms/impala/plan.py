"""IMPALA's plan: asynchronous sampling feeds a learner thread; weights go back to each source."""

import contextlib

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.impala.config import IMPALAConfig
from hrl_tasks.algorithms.impala.learner import (
    LearnerThread,
    RecordLearnerSteps,
    RecordSampled,
)
from hrl_tasks.flow import Enqueue, FeedLearner, ParallelRollouts, StandardMetricsReporting
from hrl_tasks.policies.configs import IMPALAPolicyConfig
from hrl_tasks.policies.impala import IMPALAPolicy
from hrl_tasks.rollout.async_learner import AsyncLearner, RemoteLearner


class IMPALA(Algorithm):
    """IMPALA (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561) on a Dask cluster.

    The rollout workers sample with the weights they last received; the
    learner corrects for the lag with V-trace, using the behaviour ``logp`` stored
    in each batch. The learner is a thread in the driver (``num_learners=0``), or
    with ``num_learners=1`` a process of its own fed straight from the rollout
    workers.
    """

    name = "impala"
    policy_class = IMPALAPolicy
    policy_config_class = IMPALAPolicyConfig
    config_class = IMPALAConfig
    learner_group = True

    def build_learner(self, policy):
        cfg = self.config
        if cfg.num_learners != 1 or not cfg.direct_calls:
            return super().build_learner(policy)
        return RemoteLearner.of_config(
            self.workers,
            cfg,
            AsyncLearner,
            train_batch_size=cfg.train_batch_size,
            queue_size=cfg.learner_queue_size,
            broadcast_interval=cfg.broadcast_interval,
        )

    def build_plan(self, workers, ctx):
        cfg = self.config
        if isinstance(workers.learner_group, RemoteLearner):
            self.learner = None
            # Batches stay on their workers, num_async requests in flight per worker; the
            # learner fetches each from there, and its weights go out the same way.
            rollouts = ParallelRollouts(workers, ctx, mode="raw", keep=True)
            pairs = rollouts.zip_with_source_actor(cfg.num_async)
            train_op = pairs.combine(FeedLearner(workers.learner_group, ctx))
            return StandardMetricsReporting(
                train_op,
                ctx,
                min_steps_per_report=cfg.min_steps_per_report,
                engine=workers.engine,
            )
        self.learner = LearnerThread(workers, cfg.train_batch_size, cfg.learner_queue_size)
        self.learner.start()
        # Batches as they come, num_async sample requests in flight per worker, with their source.
        rollouts = ParallelRollouts(workers, ctx, mode="raw").zip_with_source_actor(cfg.num_async)
        # Into the learner thread's queue (waits while it is full; raises if the learner
        # failed): a V-trace step per train_batch_size steps, then new weights to the sources.
        enqueue_op = rollouts.for_each(RecordSampled(ctx)).for_each(Enqueue(self.learner.inqueue))
        # The learner's finished steps, read without waiting, in this thread.
        train_op = enqueue_op.for_each(RecordLearnerSteps(self.learner, ctx))
        return StandardMetricsReporting(
            train_op, ctx, min_steps_per_report=cfg.min_steps_per_report, engine=workers.engine
        )

    # The learner thread owns the policy while it trains: the rest waits for its lock.

    def policy_lock(self):
        learner = None if self.acting_only else self.learner
        return contextlib.nullcontext() if learner is None else learner.lock

    def evaluate(self, episodes=None):
        with self.policy_lock():
            return super().evaluate(episodes)

    def compute_single_action(self, observation, explore=False):
        with self.policy_lock():
            return super().compute_single_action(observation, explore)

    def get_state(self):
        with self.policy_lock():
            return super().get_state()

    def set_state(self, state):
        with self.policy_lock():
            super().set_state(state)

    def stop(self):
        """End the learner thread, then the workers (and the cluster if this algorithm started it)."""
        if not self.acting_only and getattr(self, "learner", None) is not None:
            self.learner.stop()
        super().stop()
