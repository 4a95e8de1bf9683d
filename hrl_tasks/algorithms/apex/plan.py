"""Ape-X's plan (Horgan et al. 2018): rollout workers with their own epsilons write to
replay shards asynchronously; the learner reads from the shards and sends priorities
back. Two sub-flows run concurrently, as in RLlib Flow; only the learner's is reported.
Episode returns are those of the third of the workers with the lowest epsilons.
With ``num_learners=1`` the learner is a process of its own (`apex.learner`), and no
batch passes through the driver."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.apex.config import ApeXConfig
from hrl_tasks.algorithms.apex.learner import ReplayLearner
from hrl_tasks.algorithms.apex.replay_shard import ReplayShard
from hrl_tasks.algorithms.sharded_replay import ShardedReplay
from hrl_tasks.flow import STEPS_TRAINED, SetEpsilon, TrainOneStep, UpdateTargetNetwork
from hrl_tasks.policies.configs import DQNPolicyConfig
from hrl_tasks.policies.dqn import DQNPolicy
from hrl_tasks.rollout.async_learner import RemoteLearner

__all__ = ["ApeX", "ApeXConfig", "ReplayShard", "per_worker_epsilons"]


def per_worker_epsilons(n: int) -> list[float]:
    """Ape-X's fixed exploration: worker i of n gets 0.4 ** (1 + 7 i / (n - 1))."""
    if n == 1:
        return [0.4]
    return [0.4 ** (1 + 7 * i / (n - 1)) for i in range(n)]


class ApeX(ShardedReplay, Algorithm):
    """Distributed prioritized experience replay (Horgan et al. 2018)."""

    name = "apex"
    policy_class = DQNPolicy
    policy_config_class = DQNPolicyConfig
    config_class = ApeXConfig
    learner_group = True  # one ReplayLearner (num_learners=1; ApeXConfig.check)

    def build_learner(self, policy):
        cfg = self.config
        if not cfg.num_learners:
            return None
        return RemoteLearner.of_config(
            self.workers,
            cfg,
            ReplayLearner,
            train_batch_size=cfg.train_batch_size,
            target_update_every=cfg.target_update_every,
            broadcast_interval=cfg.weight_sync_every,
        )

    def build_plan(self, workers, ctx):
        cfg = self.config
        handles = list(workers.remote_workers)
        for handle, epsilon in zip(handles, per_worker_epsilons(len(handles)), strict=True):
            workers.set_worker_setup(handle, SetEpsilon(epsilon))  # again after a restart
        # As RLlib's Ape-X: episode metrics come from the third of the workers with the
        # lowest epsilons (at least one); a worker acting 40% at random cannot show
        # what the policy has learned. Every worker's steps count.
        reporting = handles[-max(1, len(handles) // 3) :]
        if isinstance(workers.learner_group, RemoteLearner):
            learner = workers.learner_group
            return self.sharded_plan(
                workers, ctx, lambda item: self.learned(ctx, *item), reporting, learner
            )
        train = TrainOneStep(workers, ctx, sync_weights=False)
        target = UpdateTargetNetwork(workers, ctx, cfg.target_update_every)
        return self.sharded_plan(
            workers,
            ctx,
            lambda item: target(self.send_priorities(train(item[1]), item[0])),
            reporting,
        )

    def learned(self, ctx, shard, reply: dict) -> dict:
        """A learner apart's reply, counted; its group's priorities back to ``shard``."""
        ctx.counters[STEPS_TRAINED] += reply["trained"]
        ctx.counters["learner_steps"] += reply["updates"]
        ctx.counters["target_updates"] += reply["target_updates"]
        ctx.timers["learn"] += reply["learn_s"]
        ctx.info.update(reply["info"])
        ctx.info["learner_steps"] = ctx.counters["learner_steps"]
        if "indexes" in reply:
            shard.call("update_priorities", reply["indexes"], reply["priorities"], direct=True)
        return reply
