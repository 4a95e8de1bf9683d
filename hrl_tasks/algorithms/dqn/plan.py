"""DQN's plan, as in RLlib Flow: store rounds of experience, replay batches, in round robin."""

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.algorithms.replay_learning import (
    ReplayAndLearn,
    ReplayRatio,
    make_buffer,
    mixed_replay,
    replay_state,
    restore_replay,
)
from hrl_tasks.data import MultiAgentBatch
from hrl_tasks.errors import ConfigError
from hrl_tasks.flow import (
    Concurrently,
    LocalIterator,
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
from hrl_tasks.policies.configs import DQNPolicyConfig
from hrl_tasks.policies.dqn import DQNPolicy
from hrl_tasks.policies.policy_map import PolicyMap


class DQN(Algorithm):
    """Deep Q-learning (Mnih et al. 2015) with double Q, dueling, n-step and prioritized replay."""

    name = "dqn"
    policy_class = DQNPolicy
    policy_config_class = DQNPolicyConfig
    config_class = DQNConfig
    multi_agent = True  # one replay sub-flow per policy, run together

    @staticmethod
    def policy_flow(rollouts: LocalIterator, workers, ctx, policy_ids, config) -> LocalIterator:
        """DQN's sub-flow for some policies of a multi-agent flow, as its own plan: each
        rollout round's rows stored into each policy's replay buffer, then
        ``train_steps_per_round`` learner steps per policy on replayed batches, in round
        robin. One item per rollout round (the round's batch), so that sub-flows joined
        round robin consume the rounds in step."""
        buffers = {pid: make_buffer(config) for pid in policy_ids}
        store_op = rollouts.for_each(StorePolicyRows(buffers))
        for pid in policy_ids:
            store_op = store_op.for_each(ExploreAndSync(workers, ctx, config, policy_id=pid))
        replay_ops = [
            Replay(buffers[pid], config.train_batch_size, config.learning_starts).for_each(
                TrainPolicyOnReplay(workers, ctx, config, buffers[pid], pid)
            )
            for pid in policy_ids
        ]
        return Concurrently(
            [store_op, *replay_ops],
            mode="round_robin",
            output_indexes=[0],
            round_robin_weights=[1] + [config.train_steps_per_round] * len(replay_ops),
        )

    def build_plan(self, workers, ctx):
        cfg = self.config
        if isinstance(workers.local_worker.policy, PolicyMap):
            if cfg.experience_input is not None:
                raise ConfigError(
                    "experience_input is for single-agent envs so far: a multi-agent DQN "
                    "replays only what its workers sample"
                )
            if cfg.training_intensity is not None:
                raise ConfigError(
                    "training_intensity is for single-agent envs so far; in a multi-agent one "
                    "set train_steps_per_round (gradient steps per sampling round) instead"
                )
            from hrl_tasks.algorithms.composition import composed_plan

            return composed_plan(self, workers, ctx)
        self.buffer = make_buffer(cfg)
        self.replay_ratio = ReplayRatio(cfg)
        rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync", speculative=False)
        train = TrainOneStep(workers, ctx, sync_weights=False)  # synced once per round
        priorities = UpdatePriorities(self.buffer)
        target = UpdateTargetNetwork(workers, ctx, cfg.target_update_every)
        train_op = (
            rollouts.for_each(StoreToReplayBuffer(self.buffer))
            .for_each(ExploreAndSync(workers, ctx, cfg))
            .for_each(
                ReplayAndLearn(
                    mixed_replay(self.buffer, cfg, workers.engine, ctx),
                    self.replay_ratio,
                    lambda batch: target(priorities(train(batch))),
                    ctx,
                )
            )
        )
        return StandardMetricsReporting(train_op, ctx, cfg.min_steps_per_report, workers.engine)

    def get_state(self):
        """Also the replay's state (`replay_state`)."""
        return {**super().get_state(), **replay_state(self.buffer, self.replay_ratio)}

    def set_state(self, state):
        super().set_state(state)
        restore_replay(self.buffer, self.replay_ratio, state)
        ExploreAndSync.send_epsilon(self.workers, self.policy.epsilon)


class ExploreAndSync:
    """After each sampling round: the epsilon for the steps so far, and the new weights
    (of the policy ``policy_id`` of the PolicyMap, in multi-agent runs)."""

    def __init__(self, workers, ctx, cfg: DQNConfig, policy_id=None):
        self.workers, self.ctx, self.cfg, self.policy_id = workers, ctx, cfg, policy_id

    def __call__(self, batch):
        cfg = self.cfg
        steps = self.ctx.counters[STEPS_SAMPLED]
        epsilon = linear_schedule(cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_steps, steps)
        SetEpsilon(epsilon, self.policy_id)(self.workers.local_worker)
        self.send_epsilon(self.workers, epsilon, self.policy_id)
        self.workers.sync_weights()
        key = "epsilon" if self.policy_id is None else f"{self.policy_id}/epsilon"
        self.ctx.info[key] = epsilon
        return batch

    @staticmethod
    def send_epsilon(workers, epsilon: float, policy_id=None) -> None:
        """To every remote worker before its next sample call, and again if it is re-created."""
        for handle in workers.remote_workers:
            workers.set_worker_setup(handle, SetEpsilon(epsilon, policy_id))


class StorePolicyRows:
    """Multi-agent: add each policy's rows of a MultiAgentBatch to its replay buffer."""

    def __init__(self, buffers: dict):
        self.buffers = buffers  # policy id -> replay buffer

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        for pid, buffer in self.buffers.items():
            rows = batch.get(pid)
            if rows is not None and len(rows):
                buffer.add(rows)
        return batch


class TrainPolicyOnReplay:
    """Multi-agent: one learner step of one policy on a replayed batch, its priorities
    and its target network kept as in DQN's own plan."""

    def __init__(self, workers, ctx, cfg: DQNConfig, buffer, policy_id):
        self.policy_id = policy_id
        self.train = TrainOneStep(workers, ctx, sync_weights=False)
        self.priorities = UpdatePriorities(buffer)
        self.target = UpdateTargetNetwork(workers, ctx, cfg.target_update_every, policy_id)

    def __call__(self, batch):
        if batch is None:  # the buffer is not full enough yet
            return None
        _, info = self.train(MultiAgentBatch({self.policy_id: batch}, len(batch)))
        td_error = info.get(f"{self.policy_id}/td_error")
        self.priorities((batch, {} if td_error is None else {"td_error": td_error}))
        return self.target((batch, info))
