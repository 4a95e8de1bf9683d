"""PPO's plan: bulk-synchronous sampling, one learner step per batch, as in RLlib Flow."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.ppo.config import PPOConfig
from hrl_tasks.envs import env_name
from hrl_tasks.envs.multi_agent import CentralCritic, is_multi_agent
from hrl_tasks.flow import (
    ConcatBatches,
    LocalIterator,
    ParallelRollouts,
    SelectExperiences,
    StandardMetricsReporting,
    TrainOneStep,
)
from hrl_tasks.policies.configs import PPOPolicyConfig
from hrl_tasks.policies.ppo import PPOPolicy


class PPO(Algorithm):
    """Proximal policy optimization (Schulman et al. 2017) on a Dask cluster."""

    name = "ppo"
    policy_class = PPOPolicy
    policy_config_class = PPOPolicyConfig
    config_class = PPOConfig
    multi_agent = True  # a PolicyMap learns on MultiAgentBatches in the same plan
    learner_group = True

    def rollout_env(self):
        if not self.config.central_critic:
            return self.config.env
        if not is_multi_agent(self.config.env, self.config.env_config):
            raise ConfigError(
                f"central_critic is for multi-agent envs; {env_name(self.config.env)!r} has "
                "one agent"
            )
        return CentralCritic(self.config.env)

    def build_plan(self, workers, ctx):
        mixed = set(getattr(self, "policy_algorithms", {}).values()) - {type(self)}
        if mixed:  # policies of other algorithms learn in their own sub-flows
            from hrl_tasks.algorithms.composition import composed_plan

            return composed_plan(self, workers, ctx)
        rollouts = ParallelRollouts(  # speculative by default
            workers, ctx, mode="bulk_sync", prefetch=self.config.overlap_sampling
        )
        train_op = rollouts.combine(ConcatBatches(self.config.train_batch_size)).for_each(
            TrainOneStep(workers, ctx, defer_sync=True)
        )
        return StandardMetricsReporting(train_op, ctx, engine=workers.engine)

    @staticmethod
    def policy_flow(rollouts: LocalIterator, workers, ctx, policy_ids, config) -> LocalIterator:
        """PPO's sub-flow for some policies of a multi-agent flow (a ``composition``):
        their rows of each rollout round, concatenated to ``config.train_batch_size``
        env steps, one learner step, the weights sent with the next samples. One item
        per rollout round (the learner's result, or None while the batch fills), so
        that sub-flows joined round robin consume the rounds in step."""
        concat = ConcatBatches(config.train_batch_size)
        train = TrainOneStep(workers, ctx, defer_sync=True)

        def learn_when_full(batch):
            full = concat(batch)
            return train(full[0]) if full else None

        return rollouts.for_each(SelectExperiences(policy_ids)).for_each(learn_when_full)
