"""Policies: the `Policy` interface, torch models and distributions, pure estimators and losses.

Estimators (`gae`, `vtrace`, ...) and losses (`clipped_surrogate_loss`, ...)
are pure functions; the policy classes (`PGPolicy`, `PPOPolicy`, `DQNPolicy`,
`IMPALAPolicy`, `ESPolicy`) are thin layers over them, each with a config
dataclass.
"""

from hrl_tasks.policies.actor_critic import ActorCriticPolicy, add_gae
from hrl_tasks.policies.distributions import (
    ActionDistribution,
    Categorical,
    CategoricalHead,
    DiagGaussian,
    DiagGaussianHead,
    make_action_dist,
)
from hrl_tasks.policies.dqn import N_STEP_DISCOUNTS, DQNConfig, DQNPolicy
from hrl_tasks.policies.es import NOISE_SEEDS, RETURNS, ESConfig, ESPolicy, centered_ranks
from hrl_tasks.policies.estimators import (
    discount_cumsum,
    gae,
    n_step_returns,
    n_step_targets,
    td_target_dqn,
    vtrace,
)
from hrl_tasks.policies.impala import IMPALAConfig, IMPALAPolicy
from hrl_tasks.policies.losses import clipped_surrogate_loss, entropy_loss, value_loss
from hrl_tasks.policies.models import CNN, MLP, ActorCritic, QNetwork, make_encoder
from hrl_tasks.policies.pg import PGConfig, PGPolicy
from hrl_tasks.policies.policy import Policy, TorchPolicy
from hrl_tasks.policies.ppo import PPOConfig, PPOPolicy

__all__ = [
    "CNN",
    "MLP",
    "N_STEP_DISCOUNTS",
    "NOISE_SEEDS",
    "RETURNS",
    "ActionDistribution",
    "ActorCritic",
    "ActorCriticPolicy",
    "Categorical",
    "CategoricalHead",
    "DQNConfig",
    "DQNPolicy",
    "DiagGaussian",
    "DiagGaussianHead",
    "ESConfig",
    "ESPolicy",
    "IMPALAConfig",
    "IMPALAPolicy",
    "PGConfig",
    "PGPolicy",
    "PPOConfig",
    "PPOPolicy",
    "Policy",
    "QNetwork",
    "TorchPolicy",
    "add_gae",
    "centered_ranks",
    "clipped_surrogate_loss",
    "discount_cumsum",
    "entropy_loss",
    "gae",
    "make_action_dist",
    "make_encoder",
    "n_step_returns",
    "n_step_targets",
    "td_target_dqn",
    "value_loss",
    "vtrace",
]
