"""A2C's plan: synchronous sampling and one gradient step per batch."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.pg.config import A2CConfig
from hrl_tasks.flow import ConcatBatches, ParallelRollouts, StandardMetricsReporting, TrainOneStep
from hrl_tasks.policies.configs import PGPolicyConfig
from hrl_tasks.policies.pg import PGPolicy


class A2C(Algorithm):
    """Synchronous advantage actor-critic (Mnih et al. 2016, synchronous variant)."""

    name = "a2c"
    policy_class = PGPolicy
    policy_config_class = PGPolicyConfig
    config_class = A2CConfig

    def build_plan(self, workers, ctx):
        rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync")
        train_op = rollouts.combine(ConcatBatches(self.config.train_batch_size)).for_each(
            TrainOneStep(workers, ctx, defer_sync=True)
        )
        return StandardMetricsReporting(train_op, ctx, engine=workers.engine)
