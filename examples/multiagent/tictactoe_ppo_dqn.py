"""PPO plays first and DQN second at tic-tac-toe, both learning in one flow.

    hrl-tasks train --config examples/multiagent/tictactoe_ppo_dqn.py

Each policy's own keys go in its PolicySpec; the mapping says which agent each
policy plays. `bench/multiagent_tictactoe.py` trains this and plays both
policies against a random player.
"""

from hrl_tasks.policies.policy_map import PolicySpec


def first_ppo_second_dqn(agent_id, episode):
    """PettingZoo's tictactoe_v3 agents are player_1 (moves first) and player_2."""
    return "ppo" if agent_id == "player_1" else "dqn"


experiment = {
    "algorithm": "composition",
    "env": "tictactoe_v3",
    "policies": {
        "ppo": PolicySpec("ppo", {"train_batch_size": 2048, "lr": 1e-3, "num_sgd_iter": 6,
                                  "minibatch_size": 256}),
        "dqn": PolicySpec("dqn", {"buffer_size": 50_000, "learning_starts": 2000,
                                  "epsilon_steps": 100_000, "epsilon_end": 0.05,
                                  "train_steps_per_round": 64, "train_batch_size": 128,
                                  "target_update_every": 256}),
    },
    "policy_mapping_fn": first_ppo_second_dqn,
    "config": {"num_workers": 2, "num_envs_per_worker": 8, "rollout_fragment_length": 16,
               "min_steps_per_report": 2000},
    "stop": {"env_steps_sampled": 1_000_000},
}  # fmt: skip
