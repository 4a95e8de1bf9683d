"""Policies: estimators and losses as pure functions (policy classes build on them)."""

from hrl_tasks.policies.estimators import (
    discount_cumsum,
    gae,
    n_step_returns,
    n_step_targets,
    td_target_dqn,
    vtrace,
)
from hrl_tasks.policies.losses import clipped_surrogate_loss, entropy_loss, value_loss

__all__ = [
    "clipped_surrogate_loss",
    "discount_cumsum",
    "entropy_loss",
    "gae",
    "n_step_returns",
    "n_step_targets",
    "td_target_dqn",
    "value_loss",
    "vtrace",
]
