"""A two-level agent in rooms joined by doors: the high level picks a door (or the
room's centre), the low level walks there; both are PPO policies of one flow.

    hrl-tasks train --config examples/multiagent/rooms_hierarchy.py

`bench/hierarchical_rooms.py` trains this beside flat PPO on the same task.
"""

from hrl_tasks.envs.rooms import hierarchical_rooms, high_or_low
from hrl_tasks.policies.policy_map import PolicySpec

experiment = {
    "algorithm": "ppo",
    "env": hierarchical_rooms,
    "policies": {"high": PolicySpec(), "low": PolicySpec()},
    "policy_mapping_fn": high_or_low,
    "config": {"num_workers": 2, "num_envs_per_worker": 8, "rollout_fragment_length": 64,
               "train_batch_size": 4096, "minibatch_size": 512, "num_sgd_iter": 4,
               "lr": 3e-4, "ent_coef": 0.01},
    "stop": {"policy_return_mean/high": 0.95, "env_steps_sampled": 2_000_000},
}  # fmt: skip
