"""Policy-gradient loss terms as pure torch functions.

Each function takes tensors of matching shape (one entry per sample) and
returns a scalar tensor to be minimized; callers weight and sum the terms.
"""

from __future__ import annotations

import torch


def clipped_surrogate_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """PPO's clipped surrogate objective, negated (Schulman et al. 2017, eq. 7,
    https://arxiv.org/abs/1707.06347).

    ``L = -mean(min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A))`` with
    ``ratio = exp(logp - old_logp)``.

    Args:
        logp: ``log pi(a|s)`` under the current policy (carries the gradient).
        old_logp: ``log pi_old(a|s)`` under the behaviour policy.
        advantages: Advantage estimates, e.g. from `estimators.gae`.
        clip: The clip range epsilon, > 0.

    Returns:
        A scalar tensor.

    Raises:
        ValueError: If the shapes differ or `clip` is not positive.
    """
    _check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages)
    if clip <= 0:
        raise ValueError(f"clip must be positive, got {clip}")
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    return -torch.minimum(unclipped, clipped).mean()


def value_loss(
    values: torch.Tensor,
    targets: torch.Tensor,
    clip: float | None = None,
    old_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared-error value loss, optionally with PPO-style value clipping.

    Unclipped: ``0.5 * mean((V - target)^2)``. Clipped (as in OpenAI baselines'
    PPO2 and CleanRL): with ``V_clip = V_old + clamp(V - V_old, -clip, clip)``,
    ``0.5 * mean(max((V - target)^2, (V_clip - target)^2))``.

    Args:
        values: Predicted values ``V(s)`` (carries the gradient).
        targets: Value targets, e.g. GAE value targets.
        clip: Clip range for the value change; None disables clipping.
        old_values: Values predicted when the data was collected; required
            when `clip` is given.

    Returns:
        A scalar tensor.

    Raises:
        ValueError: If the shapes differ, or `clip` is given without `old_values`.
    """
    _check_same_shape(values=values, targets=targets)
    squared = (values - targets) ** 2
    if clip is None:
        return 0.5 * squared.mean()
    if old_values is None:
        raise ValueError("value_loss with clip needs old_values")
    _check_same_shape(values=values, old_values=old_values)
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.maximum(squared, (clipped_values - targets) ** 2).mean()


def entropy_loss(entropy: torch.Tensor) -> torch.Tensor:
    """Negated mean entropy: adding ``coef * entropy_loss(H)`` to a loss rewards exploration.

    Args:
        entropy: Per-sample entropies of the action distribution.

    Returns:
        A scalar tensor, ``-mean(entropy)``.
    """
    return -entropy.mean()


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shapes must match: {shapes}")
