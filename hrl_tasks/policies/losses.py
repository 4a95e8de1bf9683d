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


def cql_penalty(q_sampled: torch.Tensor, q_data: torch.Tensor, temperature: float = 1.0):
    """CQL's conservative term (Kumar et al. 2020, CQL(H)): ``mean(T * logsumexp(Q(s, .)
    / T) - Q(s, a_data))``, pushing Q down on the actions ``q_sampled`` covers (all
    actions, or sampled ones with their log-densities subtracted) and up on the data's.

    Args:
        q_sampled: ``[B, K]``: Q of ``K`` actions at each state.
        q_data: ``[B]``: Q of the recorded action at each state.
        temperature: ``T``.
    """
    lse = temperature * torch.logsumexp(q_sampled / temperature, dim=-1)
    return (lse - q_data).mean()


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """IQL's value loss (Kostrikov et al. 2021): the asymmetric squared error
    ``mean(|tau - 1(u < 0)| * u^2)`` of ``u = Q(s, a) - V(s)``. Minimized over ``V``, it
    makes ``V(s)`` the ``tau``-expectile of Q over the recorded actions: 0.5 is the mean,
    toward 1 the best of them, without ever evaluating an action the data lacks.

    Args:
        diff: ``[B]``: ``Q(s, a) - V(s)`` (the gradient flows into ``V`` only).
        expectile: ``tau`` in (0, 1).
    """
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


def advantage_weights(advantages: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    """IQL's (and AWR's) weights of the recorded actions in the actor's loss:
    ``min(exp(beta * A), max_weight)``. Pass ``advantages`` detached."""
    return torch.exp(beta * advantages).clamp(max=max_weight)


def marwil_weights(advantages: torch.Tensor, norm_sq: torch.Tensor, beta: float) -> torch.Tensor:
    """MARWIL's weights of the imitated actions: ``exp(beta * A / sqrt(norm_sq))``.

    ``norm_sq`` is the moving average of squared advantages (a scalar tensor), so the
    exponent is the advantage in units of its typical size; pass ``advantages``
    detached (the weights scale the policy's term, they are not learned through).
    """
    return torch.exp(beta * advantages / torch.clamp(norm_sq, min=1e-8).sqrt())


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


def twin_q_loss(
    q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Both critics' importance-weighted squared errors against one target (Fujimoto et
    al. 2018, clipped double Q): ``0.5 * (mean(w (Q1 - y)^2) + mean(w (Q2 - y)^2))``;
    Stable-Baselines3's SAC takes half, its TD3 the full sum (double it).

    Args:
        q1, q2: ``Q_i(s, a)`` of the taken actions (carry the gradient).
        targets: ``y``, without gradient.
        weights: Importance weights of prioritized replay (ones otherwise).
    """
    _check_same_shape(q1=q1, q2=q2, targets=targets, weights=weights)
    return 0.5 * ((weights * (q1 - targets) ** 2).mean() + (weights * (q2 - targets) ** 2).mean())


def soft_q_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_logp: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """SAC's critic targets (Haarnoja et al. 2018, eq. 3 with twin targets):
    ``y = r + D * (min(Q1'(s', a'), Q2'(s', a')) - alpha * log pi(a' | s'))`` with
    ``a' ~ pi(s')``; ``D`` is ``gamma^m (1 - terminated)`` (n-step, or ``gamma (1 -
    terminated)``). TD3's targets are the same with ``alpha = 0``.

    Discrete actions pass the expectation over ``pi(s')`` instead: ``next_q_i`` and
    ``next_logp`` of shape ``[B, n]`` and the probabilities as ``next_probs``
    through `soft_values`.
    """
    _check_same_shape(
        rewards=rewards, discounts=discounts, next_q1=next_q1, next_q2=next_q2, next_logp=next_logp
    )
    return rewards + discounts * (torch.minimum(next_q1, next_q2) - alpha * next_logp)


def soft_values(
    q1: torch.Tensor, q2: torch.Tensor, logp: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """``V(s) = sum_a pi(a|s) (min(Q1, Q2)(s, a) - alpha log pi(a|s))`` over a discrete
    action axis (the last), from ``[B, n]`` Q-values and log-probabilities
    (Christodoulou 2019, eq. 3)."""
    _check_same_shape(q1=q1, q2=q2, logp=logp)
    return (logp.exp() * (torch.minimum(q1, q2) - alpha * logp)).sum(-1)


def sac_actor_loss(
    logp: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """SAC's policy loss (Haarnoja et al. 2018, eq. 7): ``mean(alpha * log pi(a|s) -
    min(Q1, Q2)(s, a))`` for reparameterized ``a ~ pi(s)``; for ``[B, n]`` inputs
    (discrete actions) the expectation over ``pi``: ``mean(sum_a pi (alpha log pi -
    min Q))``."""
    _check_same_shape(logp=logp, q1=q1, q2=q2)
    inner = alpha * logp - torch.minimum(q1, q2)
    if logp.ndim == 2:
        return (logp.exp() * inner).sum(-1).mean()
    return inner.mean()


def temperature_loss(
    log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """The entropy temperature's loss (Haarnoja et al. 2018, eq. 18, in log alpha as
    Stable-Baselines3): ``-mean(log alpha * (log pi(a|s) + target_entropy))``; its
    gradient raises alpha while the entropy ``-log pi`` is below the target.

    Args:
        log_alpha: The scalar parameter.
        logp: Per-sample ``log pi(a|s)`` (or ``-H`` for discrete actions), no gradient.
        target_entropy: The entropy alpha is tuned toward.
    """
    return -(log_alpha * (logp.detach() + target_entropy)).mean()
