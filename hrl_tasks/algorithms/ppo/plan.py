"""PPO's plan: bulk-synchronous sampling, one learner step per batch, as in RLlib Flow."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.ppo.config import PPOConfig
from hrl_tasks.flow import (
    ConcatBatches,
    ParallelRollouts,
    StandardMetricsReporting,
    TrainOneStep,
)
from hrl_tasks.policies.ppo import PPOConfig as PPOPolicyConfig
from hrl_tasks.policies.ppo import PPOPolicy


class PPO(Algorithm):
    """Proximal policy optimization (Schulman et al. 2017) on a Dask cluster."""

    name = "ppo"
    policy_class = PPOPolicy
    policy_config_class = PPOPolicyConfig
    config_class = PPOConfig

    def build_plan(self, workers, ctx):
        rollouts = ParallelRollouts(  # speculative by default
            workers, ctx, mode="bulk_sync", prefetch=self.config.overlap_sampling
        )
        train_op = rollouts.combine(ConcatBatches(self.config.train_batch_size)).for_each(
            TrainOneStep(workers, ctx, defer_sync=True)
        )
        return StandardMetricsReporting(train_op, ctx, engine=workers.engine)
