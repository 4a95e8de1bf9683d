"""CQL's plan: batches of recorded transitions, a gradient step each, the targets moved."""

from __future__ import annotations

from hrl_tasks.algorithms.cql.config import CQLConfig
from hrl_tasks.algorithms.offline import OfflineAlgorithm
from hrl_tasks.policies.configs import CQLPolicyConfig
from hrl_tasks.policies.cql import CQLPolicy


class CQL(OfflineAlgorithm):
    """Conservative Q-learning (Kumar et al. 2020) on SAC, for Box and Discrete actions,
    from a recording made with ``record_experience`` or written in its schema (it needs
    ``next_obs``)."""

    name = "cql"
    policy_class = CQLPolicy
    policy_config_class = CQLPolicyConfig
    config_class = CQLConfig
    columns = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
    moves_targets = True
