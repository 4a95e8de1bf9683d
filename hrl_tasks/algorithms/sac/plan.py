"""SAC's plan, and TD3's: sample a round, store it, replay at a fixed ratio, move the targets."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.replay_learning import (
    ReplayAndLearn,
    ReplayRatio,
    make_buffer,
    mixed_replay,
    replay_state,
    restore_replay,
)
from hrl_tasks.algorithms.sac.config import SACConfig
from hrl_tasks.algorithms.sharded_replay import ShardedReplay
from hrl_tasks.flow import (
    ParallelRollouts,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainOneStep,
    UpdatePriorities,
)
from hrl_tasks.flow.context import STEPS_SAMPLED
from hrl_tasks.policies.configs import SACPolicyConfig
from hrl_tasks.policies.sac import SACPolicy


class SAC(ShardedReplay, Algorithm):
    """Soft actor-critic (Haarnoja et al. 2018): continuous and discrete actions.

    With ``num_replay_shards`` the replay lives in shards fed by the rollout workers
    while the learner replays (`ShardedReplay`, Ape-X's distributed replay);
    ``training_intensity`` then holds the ratio through a rate limiter that makes the
    samplers wait for the learner."""

    name = "sac"
    policy_class = SACPolicy
    policy_config_class = SACPolicyConfig
    config_class = SACConfig
    learner_group = True

    def build_plan(self, workers, ctx):
        cfg = self.config
        if cfg.num_replay_shards:
            return self.sharded_learning(workers, ctx)
        self.buffer = make_buffer(cfg)
        self.replay_ratio = ReplayRatio(cfg)
        rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync", speculative=False)
        train = TrainOneStep(workers, ctx, sync_weights=False)  # synced once per round
        priorities = UpdatePriorities(self.buffer)
        targets = UpdateTargets(workers, ctx)
        train_op = (
            rollouts.for_each(StoreToReplayBuffer(self.buffer))
            .for_each(UniformUntilLearning(workers, ctx, cfg.learning_starts))
            .for_each(
                ReplayAndLearn(
                    mixed_replay(self.buffer, cfg, workers.engine, ctx),
                    self.replay_ratio,
                    lambda batch: targets(priorities(train(batch))),
                    ctx,
                )
            )
        )
        return StandardMetricsReporting(train_op, ctx, cfg.min_steps_per_report, workers.engine)

    def sharded_learning(self, workers, ctx):
        """The plan with replay shards: each replayed batch a learner step, its
        priorities back to its shard, the targets moved."""
        train = TrainOneStep(workers, ctx, sync_weights=False)  # synced every few updates
        targets = UpdateTargets(workers, ctx)
        self.exploration = UniformUntilLearning(workers, ctx, self.config.learning_starts)
        self.exploration(None, sync=False)  # uniform from the first sample on
        return self.sharded_plan(
            workers, ctx, lambda item: targets(self.send_priorities(train(item[1]), item[0]))
        )

    def after_stored(self, ctx) -> None:
        self.exploration(None, sync=False)

    def get_state(self):
        """Also the driver's replay state (`replay_state`); replay shards start empty."""
        if self.config.num_replay_shards:
            return super().get_state()
        return {**super().get_state(), **replay_state(self.buffer, self.replay_ratio)}

    def set_state(self, state):
        super().set_state(state)
        if not self.config.num_replay_shards:
            restore_replay(self.buffer, self.replay_ratio, state)
        UniformUntilLearning.send(self.workers, self.policy.uniform_actions)


class SetUniformActions:
    """Picklable: a rollout worker's policy draws uniform actions (True) or its own."""

    def __init__(self, uniform: bool):
        self.uniform = bool(uniform)

    def __call__(self, worker):
        worker.policy.set_uniform_actions(self.uniform)
        return self.uniform


class UniformUntilLearning:
    """After each sampling round: uniform random actions while fewer than
    ``learning_starts`` env steps were sampled (as Stable-Baselines3), the policy's
    after; and the new weights to every worker."""

    def __init__(self, workers, ctx, learning_starts: int):
        self.workers, self.ctx, self.learning_starts = workers, ctx, learning_starts
        self.sent = None

    def __call__(self, batch, sync: bool = True):
        uniform = self.ctx.counters[STEPS_SAMPLED] < self.learning_starts
        if uniform != self.sent:
            SetUniformActions(uniform)(self.workers.local_worker)
            if self.workers.learner_group is not None:  # their state is the checkpoint's
                self.workers.learner_group.queue("set_uniform_actions", uniform)
            self.send(self.workers, uniform)
            self.sent = uniform
        if sync:
            self.workers.sync_weights()
        return batch

    @staticmethod
    def send(workers, uniform: bool) -> None:
        """To every remote worker before its next sample call, and again if it is re-created."""
        for handle in workers.remote_workers:
            workers.set_worker_setup(handle, SetUniformActions(uniform))


class UpdateTargets:
    """After each learner step: the policy's targets moved when it says they are due
    (SAC: every step; TD3: with each actor update)."""

    def __init__(self, workers, ctx):
        self.workers, self.ctx = workers, ctx

    def __call__(self, item):
        learner = self.workers.learner
        if learner.target_due():
            learner.update_target()
            self.ctx.counters["target_updates"] += 1
        return item
