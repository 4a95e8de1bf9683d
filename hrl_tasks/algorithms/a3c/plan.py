"""A3C's plan: workers compute gradients on their own batches; the driver (or, with
``num_learners=1``, a learner process fed straight from the workers) applies them as
they arrive, and new weights go only to the worker that sent them."""

from hrl_tasks.algorithms.a3c.config import A3CConfig
from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.flow import (
    ApplyGradients,
    ComputeGradients,
    FeedLearner,
    ParallelRollouts,
    StandardMetricsReporting,
)
from hrl_tasks.policies.configs import PGPolicyConfig
from hrl_tasks.policies.pg import PGPolicy
from hrl_tasks.rollout.async_learner import GradientLearner, RemoteLearner


class A3C(Algorithm):
    """Asynchronous advantage actor-critic (Mnih et al. 2016)."""

    name = "a3c"
    policy_class = PGPolicy
    policy_config_class = PGPolicyConfig
    config_class = A3CConfig
    workers_learn = True
    learner_group = True  # one GradientLearner (num_learners=1; A3CConfig.check)

    def build_learner(self, policy):
        cfg = self.config
        if not cfg.num_learners:
            return None
        return RemoteLearner.of_config(self.workers, cfg, GradientLearner, to_source=True)

    def build_plan(self, workers, ctx):
        apart = isinstance(workers.learner_group, RemoteLearner)
        # Gradients computed where each batch is; with the learner apart they stay there
        # too, and the learner fetches them.
        grads = (
            ParallelRollouts(workers, ctx, mode="raw", keep=apart)
            .for_each(ComputeGradients())
            .zip_with_source_actor(num_async=self.config.num_async)
        )
        if apart:
            train_op = grads.combine(FeedLearner(workers.learner_group, ctx))
        else:
            train_op = grads.for_each(ApplyGradients(workers, ctx, update_all=False))
        return StandardMetricsReporting(
            train_op,
            ctx,
            min_steps_per_report=self.config.min_steps_per_report,
            engine=workers.engine,
        )
