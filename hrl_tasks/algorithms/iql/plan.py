"""IQL's plan: batches of recorded transitions, a gradient step each, the targets moved."""

from __future__ import annotations

from hrl_tasks.algorithms.iql.config import IQLConfig
from hrl_tasks.algorithms.offline import OfflineAlgorithm
from hrl_tasks.policies.configs import IQLPolicyConfig
from hrl_tasks.policies.iql import IQLPolicy


class IQL(OfflineAlgorithm):
    """Implicit Q-learning (Kostrikov et al. 2021), for Box and Discrete actions, from a
    recording made with ``record_experience`` or written in its schema (it needs
    ``next_obs``), with off-policy estimates of the policy it extracts."""

    name = "iql"
    policy_class = IQLPolicy
    policy_config_class = IQLPolicyConfig
    config_class = IQLConfig
    columns = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
    moves_targets = True
