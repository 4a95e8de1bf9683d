"""Composition's plan, as RLlib Flow's two-trainer example: one rollout flow, duplicated
into each algorithm's sub-flow, the sub-flows run at the same time with ``Concurrently``.

    rollouts = ParallelRollouts(workers, ctx)                 # MultiAgentBatches
    ppo_in, dqn_in = rollouts.duplicate(2)
    ppo_op = PPO.policy_flow(ppo_in, ..., ["ppo"], ppo_config)  # on-policy batches
    dqn_op = DQN.policy_flow(dqn_in, ..., ["dqn"], dqn_config)  # replay
    train_op = Concurrently([ppo_op, dqn_op], mode="round_robin")

Each policy's spec names its algorithm (``PolicySpec("dqn", {...})``), whose
``policy_flow`` trains it; policies not in ``policies_to_train`` only act. A
sub-flow yields one item per rollout round it consumes (PPO learns when its
batch is full, DQN replays ``train_steps_per_round`` times per round), so both
learn from every round. RLlib's example joins them with ``mode="async"``
(a thread each); here round robin keeps a checkpoint taken between
iterations consistent, since no sub-flow runs ahead in the background.
"""

from __future__ import annotations

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.composition.config import CompositionConfig
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.flow import Concurrently, ParallelRollouts, StandardMetricsReporting


class Composition(Algorithm):
    """Policies of different algorithms (PPO, DQN) trained together on one multi-agent env.

    Example::

        Composition({
            "env": "tictactoe_v3",
            "policies": {"ppo": PolicySpec("ppo"), "dqn": PolicySpec("dqn", {"lr": 5e-4})},
            "policy_mapping_fn": lambda agent, episode: "ppo" if agent == "player_1" else "dqn",
        })
    """

    name = "composition"
    config_class = CompositionConfig
    multi_agent = True

    def build_policy(self):
        specs = self.config.policies or {}
        unnamed = [pid for pid, spec in specs.items() if spec.algorithm is None]
        if not specs or unnamed:
            raise ConfigError(
                "a composition needs policies={id: PolicySpec(algorithm, config)} naming each "
                "policy's algorithm, e.g. {'a': PolicySpec('ppo'), 'b': PolicySpec('dqn')}"
                + (f"; {unnamed} name none" if unnamed else "")
            )
        return super().build_policy()

    def build_plan(self, workers, ctx):
        return composed_plan(self, workers, ctx)


def composed_plan(algo: Algorithm, workers, ctx):
    """The flow of every trained policy's algorithm, fed by one duplicated rollout flow."""
    trained = list(workers.local_worker.policy.policies_to_train)
    for pid in trained:
        cls = algo.policy_algorithms[pid]
        if getattr(cls, "policy_flow", None) is None:
            raise ConfigError(
                f"{cls.name} has no sub-flow for a composition; policy {pid!r} can act "
                "(leave it out of policies_to_train) but not learn here"
            )
    rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync", speculative=False)
    inputs = rollouts.duplicate(max(1, len(trained)))
    flows = [  # one sub-flow per trained policy, with that policy's own keys
        algo.policy_algorithms[pid].policy_flow(
            stream, workers, ctx, [pid], algo.policy_configs[pid]
        )
        for stream, pid in zip(inputs, trained, strict=False)
    ]
    if not flows:  # nothing learns: the rollouts alone (evaluation-like runs)
        flows = [inputs[0]]
    # Each sub-flow yields one item per rollout round: round robin keeps them in step,
    # and nothing runs between train() calls (checkpoints see a quiet state).
    train_op = flows[0] if len(flows) == 1 else Concurrently(flows, mode="round_robin")
    steps = getattr(algo.config, "min_steps_per_report", 0)
    return StandardMetricsReporting(train_op, ctx, steps, workers.engine)
