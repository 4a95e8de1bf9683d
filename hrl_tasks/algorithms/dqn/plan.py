"""DQN's plan, as in RLlib Flow: store rounds of experience, replay batches, in round robin."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.data import PrioritizedReplayBuffer, ReplayBuffer
from hrl_tasks.flow import (
    Concurrently,
    ParallelRollouts,
    Replay,
    SetEpsilon,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainOneStep,
    UpdatePriorities,
    UpdateTargetNetwork,
    linear_schedule,
)
from hrl_tasks.flow.context import STEPS_SAMPLED
from hrl_tasks.policies.dqn import DQNConfig as DQNPolicyConfig
from hrl_tasks.policies.dqn import DQNPolicy


class DQN(Algorithm):
    """Deep Q-learning (Mnih et al. 2015) with double Q, dueling, n-step and prioritized replay."""

    name = "dqn"
    policy_class = DQNPolicy
    policy_config_class = DQNPolicyConfig
    config_class = DQNConfig

    def build_plan(self, workers, ctx):
        cfg = self.config
        self.buffer = make_buffer(cfg)
        rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync", speculative=False)
        store_op = rollouts.for_each(StoreToReplayBuffer(self.buffer)).for_each(
            ExploreAndSync(workers, ctx, cfg)
        )
        train = TrainOneStep(workers, ctx, sync_weights=False)  # synced once per round
        priorities = UpdatePriorities(self.buffer)
        target = UpdateTargetNetwork(workers, ctx, cfg.target_update_every)
        replay_op = (  # None until the buffer holds learning_starts rows
            Replay(self.buffer, cfg.train_batch_size, cfg.learning_starts).for_each(
                lambda batch: batch and target(priorities(train(batch)))
            )
        )
        train_op = Concurrently(
            [store_op, replay_op],
            mode="round_robin",
            output_indexes=[1],
            round_robin_weights=[1, cfg.train_steps_per_round],
        )
        return StandardMetricsReporting(train_op, ctx, cfg.min_steps_per_report, workers.engine)

    def get_state(self):
        """Also the replay buffer's sampling state (not its rows: a resumed run refills it)."""
        return {
            **super().get_state(),
            "replay_rows": len(self.buffer),
            "replay_rng": self.buffer.get_rng_state(),
        }

    def set_state(self, state):
        super().set_state(state)
        if "replay_rng" in state:
            self.buffer.set_rng_state(state["replay_rng"])
        ExploreAndSync.send_epsilon(self.workers, self.policy.epsilon)


def make_buffer(cfg: DQNConfig):
    if cfg.prioritized_replay:
        return PrioritizedReplayBuffer(
            cfg.buffer_size, alpha=cfg.prioritized_alpha, beta=cfg.prioritized_beta, seed=cfg.seed
        )
    return ReplayBuffer(cfg.buffer_size, seed=cfg.seed)


class ExploreAndSync:
    """After each sampling round: the epsilon for the steps so far, and the new weights."""

    def __init__(self, workers, ctx, cfg: DQNConfig):
        self.workers, self.ctx, self.cfg = workers, ctx, cfg

    def __call__(self, batch):
        cfg = self.cfg
        steps = self.ctx.counters[STEPS_SAMPLED]
        epsilon = linear_schedule(cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_steps, steps)
        self.workers.local_worker.policy.set_epsilon(epsilon)
        self.send_epsilon(self.workers, epsilon)
        self.workers.sync_weights()
        self.ctx.info["epsilon"] = epsilon
        return batch

    @staticmethod
    def send_epsilon(workers, epsilon: float) -> None:
        """To every remote worker before its next sample call, and again if it is re-created."""
        for handle in workers.remote_workers:
            workers.set_worker_setup(handle, SetEpsilon(epsilon))
