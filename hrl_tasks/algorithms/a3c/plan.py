"""A3C's plan: workers compute gradients on their own batches; the driver applies
them as they arrive and sends new weights only to the worker that sent them."""

from hrl_tasks.algorithms.a3c.config import A3CConfig
from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.flow import (
    ApplyGradients,
    ComputeGradients,
    ParallelRollouts,
    StandardMetricsReporting,
)
from hrl_tasks.policies.configs import PGPolicyConfig
from hrl_tasks.policies.pg import PGPolicy


class A3C(Algorithm):
    """Asynchronous advantage actor-critic (Mnih et al. 2016)."""

    name = "a3c"
    policy_class = PGPolicy
    policy_config_class = PGPolicyConfig
    config_class = A3CConfig
    workers_learn = True

    def build_plan(self, workers, ctx):
        grads = (
            ParallelRollouts(workers, ctx, mode="raw")
            .for_each(ComputeGradients())
            .zip_with_source_actor(num_async=self.config.num_async)
        )
        train_op = grads.for_each(ApplyGradients(workers, ctx, update_all=False))
        return StandardMetricsReporting(
            train_op,
            ctx,
            min_steps_per_report=self.config.min_steps_per_report,
            engine=workers.engine,
        )
