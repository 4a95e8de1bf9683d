"""Return and advantage estimators as pure numpy functions.

All sequences are time-major: axis 0 is time ``t = 0 .. T-1``; any trailing axes
(e.g. the envs of a vector env) are batch axes and are treated independently.
Row ``t`` describes the transition ``(s_t, a_t, r_t, s_{t+1})``: ``rewards[t]``
is the reward received after ``a_t``; ``terminateds[t]`` / ``truncateds[t]``
say that ``s_{t+1}`` ended the episode by termination (no bootstrap, its value
is 0) or by truncation (bootstrap with the value of ``s_{t+1}``, the final
observation the env returned before resetting).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def discount_cumsum(x: ArrayLike, gamma: float) -> np.ndarray:
    """Discounted cumulative sum along time: ``y_t = sum_{k>=0} gamma^k x_{t+k}``.

    Computed backwards as ``y_t = x_t + gamma * y_{t+1}``, ``y_T = 0``.

    Args:
        x: Array of shape ``[T, ...]``.
        gamma: Discount factor.

    Returns:
        Array of the same shape, in float64 or the float dtype of `x`.
    """
    (x,) = _as_float(x)
    _check_time_major("x", x)
    out = np.empty_like(x)
    acc = np.zeros_like(x[0])
    for t in reversed(range(len(x))):
        acc = x[t] + gamma * acc
        out[t] = acc
    return out


def gae(
    rewards_t: ArrayLike,
    values_t: ArrayLike,
    next_values_t: ArrayLike,
    terminateds_t: ArrayLike,
    truncateds_t: ArrayLike,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)`` and
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}`` with
    ``done_t = terminated_t or truncated_t`` and ``A_T = 0``; value targets are
    ``A_t + V(s_t)``. The recursion stops at every episode end, so nothing leaks
    across episodes; a fragment that ends mid-episode bootstraps from
    ``next_values_t[T-1]``.

    The caller supplies ``next_values_t[t] = V(s_{t+1})`` for every row, which is
    how truncation and fragment ends are told apart from resets::

        next_values = np.concatenate([values[1:], [V(obs_after_last_step)]])
        next_values[truncateds] = V(final_obs[truncateds])  # pre-reset observation
        # (rows with terminateds set are ignored: their next value is 0)

    Args:
        rewards_t: Rewards ``r_t``, shape ``[T, ...]``.
        values_t: ``V(s_t)``, same shape.
        next_values_t: ``V(s_{t+1})``, same shape.
        terminateds_t: Bool, episode terminated at ``s_{t+1}``, same shape.
        truncateds_t: Bool, episode truncated at ``s_{t+1}``, same shape.
        gamma: Discount factor.
        lam: GAE lambda; 0 gives one-step TD errors, 1 Monte Carlo returns minus V.

    Returns:
        ``(advantages, value_targets)``, each shaped like `rewards_t`.

    Raises:
        ValueError: If the shapes differ.
    """
    r_t, v_t, v_tp1 = _as_float(rewards_t, values_t, next_values_t)
    term_t, trunc_t = np.asarray(terminateds_t, bool), np.asarray(truncateds_t, bool)
    _check_same_shape(
        rewards_t=r_t, values_t=v_t, next_values_t=v_tp1, terminateds_t=term_t, truncateds_t=trunc_t
    )
    delta_t = r_t + gamma * np.where(term_t, 0.0, v_tp1) - v_t
    trace_t = gamma * lam * ~(term_t | trunc_t)
    adv_t = np.empty_like(delta_t)
    if delta_t.ndim == 1:  # one trajectory: Python floats step ~5x faster than numpy scalars
        deltas, traces = delta_t.tolist(), trace_t.tolist()
        acc, out = 0.0, [0.0] * len(deltas)
        for t in range(len(deltas) - 1, -1, -1):
            acc = deltas[t] + traces[t] * acc
            out[t] = acc
        adv_t[:] = out
        return adv_t, adv_t + v_t
    acc = np.zeros_like(delta_t[0])
    for t in reversed(range(len(delta_t))):
        acc = delta_t[t] + trace_t[t] * acc
        adv_t[t] = acc
    return adv_t, adv_t + v_t


def vtrace(
    behaviour_logp: ArrayLike,
    target_logp: ArrayLike,
    rewards: ArrayLike,
    values: ArrayLike,
    bootstrap_value: ArrayLike,
    discounts: ArrayLike,
    clip_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace targets (Espeholt et al. 2018, IMPALA, eq. 1, https://arxiv.org/abs/1802.01561).

    ``v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V`` with
    ``delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))``,
    ``rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))``, ``c_i = min(c_bar, pi/mu)``
    and ``V(x_T) = bootstrap_value``; computed as
    ``v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1}))``. The policy
    gradient advantage is ``rho_pg_s (r_s + gamma_s v_{s+1} - V(x_s))`` with
    ``v_T = bootstrap_value``.

    ``discounts[t]`` is ``gamma`` inside an episode and 0 where the episode
    terminated at ``x_{t+1}``. A truncation inside the fragment must also get
    discount 0 (``x_{t+1}`` is then the next episode's first state), which treats
    it as a termination; to bootstrap it exactly, end the fragment there.

    Args:
        behaviour_logp: ``log mu(a_t|x_t)``, shape ``[T, ...]``.
        target_logp: ``log pi(a_t|x_t)``, same shape.
        rewards: ``r_t``, same shape.
        values: ``V(x_t)``, same shape.
        bootstrap_value: ``V(x_T)``, shape ``[...]``.
        discounts: ``gamma_t``, shape ``[T, ...]``.
        clip_rho_threshold: ``rho_bar``; None disables clipping.
        clip_c_threshold: ``c_bar``; None disables clipping.
        clip_pg_rho_threshold: Clip of the policy-gradient rho; None disables it.

    Returns:
        ``(vs, pg_advantages)``, each shaped like `rewards`.

    Raises:
        ValueError: If the shapes do not match.
    """
    mu_logp, pi_logp, r_t, v_t, gamma_t = _as_float(
        behaviour_logp, target_logp, rewards, values, discounts
    )
    _check_same_shape(
        behaviour_logp=mu_logp, target_logp=pi_logp, rewards=r_t, values=v_t, discounts=gamma_t
    )
    (v_T,) = _as_float(bootstrap_value)
    if v_T.shape != v_t.shape[1:]:
        raise ValueError(f"bootstrap_value shape {v_T.shape} != values shape[1:] {v_t.shape[1:]}")
    ratio = np.exp(pi_logp - mu_logp)
    rho_t, c_t, rho_pg_t = (
        ratio if clip is None else np.minimum(clip, ratio)
        for clip in (clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold)
    )
    v_tp1 = np.concatenate([v_t[1:], v_T[None]])
    delta_t = rho_t * (r_t + gamma_t * v_tp1 - v_t)
    vs_minus_v = np.empty_like(v_t)
    acc = np.zeros_like(v_T)
    for s in reversed(range(len(v_t))):
        acc = delta_t[s] + gamma_t[s] * c_t[s] * acc
        vs_minus_v[s] = acc
    vs = vs_minus_v + v_t
    vs_tp1 = np.concatenate([vs[1:], v_T[None]])
    return vs, rho_pg_t * (r_t + gamma_t * vs_tp1 - v_t)


def n_step_returns(
    rewards_t: ArrayLike,
    terminateds_t: ArrayLike,
    gamma: float,
    n: int,
    truncateds_t: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts of an n-step target ``G_t = R_t + D_t * V(s_{b_t + 1})``.

    With ``m_t`` the number of steps until the first of: n steps, the episode's
    end (terminated or truncated), the end of the sequence,
    ``R_t = sum_{k<m_t} gamma^k r_{t+k}``, ``b_t = t + m_t - 1`` the last step
    summed, and ``D_t = gamma^{m_t} * (1 - terminated_{b_t})``. For DQN with a
    replay buffer, store ``R_t``, ``D_t`` and ``next_obs[b_t]`` per row.

    Args:
        rewards_t: ``r_t``, shape ``[T, ...]``.
        terminateds_t: Bool, same shape.
        gamma: Discount factor.
        n: Maximum number of rewards summed, >= 1.
        truncateds_t: Bool, same shape; default all False.

    Returns:
        ``(returns R_t, bootstrap_discounts D_t, bootstrap_indices b_t)``.

    Raises:
        ValueError: If `n` < 1 or the shapes differ.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    (r_t,) = _as_float(rewards_t)
    term_t = np.asarray(terminateds_t, bool)
    trunc_t = np.zeros_like(term_t) if truncateds_t is None else np.asarray(truncateds_t, bool)
    _check_same_shape(rewards_t=r_t, terminateds_t=term_t, truncateds_t=trunc_t)
    T = len(r_t)
    returns = np.zeros_like(r_t)
    steps = np.zeros(r_t.shape, dtype=np.int64)  # m_t
    summing = np.ones(r_t.shape, dtype=bool)  # row t still adds rewards at t + k
    for k in range(min(n, T)):
        live = summing[: T - k]  # rows with t + k < T
        returns[: T - k] += np.where(live, gamma**k * r_t[k:], 0.0)
        steps[: T - k] += live
        summing[: T - k] &= ~(term_t[k:] | trunc_t[k:])
    t_idx = np.arange(T).reshape((T,) + (1,) * (r_t.ndim - 1))
    last = t_idx + steps - 1
    discounts = gamma**steps * ~np.take_along_axis(term_t, last, axis=0)
    return returns, discounts.astype(r_t.dtype), last


def n_step_targets(
    rewards_t: ArrayLike,
    next_values_t: ArrayLike,
    terminateds_t: ArrayLike,
    gamma: float,
    n: int,
    truncateds_t: ArrayLike | None = None,
) -> np.ndarray:
    """N-step TD targets ``G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - term_{t+m-1}) V_{t+m-1}``.

    ``V_t = next_values_t[t]`` is the value of ``s_{t+1}`` (e.g.
    ``max_a Q_target(s_{t+1}, a)``; at a truncation, of the final observation).
    ``m`` is as in `n_step_returns` (Sutton & Barto 2018, ch. 7; Hessel et al.
    2018, Rainbow, https://arxiv.org/abs/1710.02298).

    Args:
        rewards_t: ``r_t``, shape ``[T, ...]``.
        next_values_t: ``V(s_{t+1})``, same shape.
        terminateds_t: Bool, same shape.
        gamma: Discount factor.
        n: Maximum number of rewards summed, >= 1.
        truncateds_t: Bool, same shape; default all False.

    Returns:
        The targets, shaped like `rewards_t`.

    Raises:
        ValueError: If `n` < 1 or the shapes differ.
    """
    returns, discounts, last = n_step_returns(rewards_t, terminateds_t, gamma, n, truncateds_t)
    (v_tp1,) = _as_float(next_values_t)
    _check_same_shape(rewards_t=returns, next_values_t=v_tp1)
    return returns + discounts * np.take_along_axis(v_tp1, last, axis=0)


def td_target_dqn(
    rewards: ArrayLike,
    next_q_target: ArrayLike,
    terminateds: ArrayLike,
    gamma: float | ArrayLike,
    next_q_online: ArrayLike | None = None,
) -> np.ndarray:
    """One-step Q-learning target ``r + gamma (1 - term) Q_target(s', a*)``.

    DQN (Mnih et al. 2015) uses ``a* = argmax_a Q_target(s', a)``; double DQN
    (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461) picks
    ``a* = argmax_a Q_online(s', a)`` and evaluates it with ``Q_target``.

    Args:
        rewards: ``r``, shape ``[B]``.
        next_q_target: ``Q_target(s', .)``, shape ``[B, A]``.
        terminateds: Bool, shape ``[B]``.
        gamma: Discount, a scalar or shape ``[B]`` (e.g. n-step ``D_t``).
        next_q_online: ``Q_online(s', .)``, shape ``[B, A]``, for double DQN.

    Returns:
        Targets of shape ``[B]``.

    Raises:
        ValueError: If the shapes do not match.
    """
    r, q_target = _as_float(rewards, next_q_target)
    term = np.asarray(terminateds, bool)
    if q_target.ndim != 2 or q_target.shape[0] != r.shape[0] or r.ndim != 1:
        raise ValueError(
            f"need rewards [B] and next_q_target [B, A], got {r.shape}, {q_target.shape}"
        )
    _check_same_shape(rewards=r, terminateds=term)
    if next_q_online is None:
        next_v = q_target.max(axis=1)
    else:
        q_online = np.asarray(next_q_online)
        _check_same_shape(next_q_target=q_target, next_q_online=q_online)
        next_v = np.take_along_axis(q_target, q_online.argmax(axis=1)[:, None], axis=1)[:, 0]
    return r + np.asarray(gamma) * ~term * next_v


def categorical_projection(
    next_probs: ArrayLike,
    rewards: ArrayLike,
    terminateds: ArrayLike,
    gamma: float | ArrayLike,
    support: ArrayLike,
) -> np.ndarray:
    """C51's target distribution (Bellemare et al. 2017, https://arxiv.org/abs/1707.06887,
    algorithm 1): each atom ``z_j`` of the next state's distribution ``next_probs``
    moved to ``r + gamma (1 - term) z_j``, clipped to the support, and its probability
    split between the two atoms around it in proportion to their nearness.

    Args:
        next_probs: The next state's probabilities over ``support`` for the action
            chosen there, shape ``[B, N]``.
        rewards: ``r``, shape ``[B]`` (n-step: ``R_t``).
        terminateds: Bool, shape ``[B]``.
        gamma: Discount, a scalar or shape ``[B]`` (n-step: ``D_t``).
        support: The ``N`` evenly spaced atoms, ``v_min`` to ``v_max``.

    Returns:
        The target probabilities ``[B, N]`` (each row sums to 1).

    Raises:
        ValueError: If the shapes do not match.
    """
    probs, r, z = _as_float(next_probs, rewards, support)
    term = np.asarray(terminateds, bool)
    if probs.ndim != 2 or r.shape != (probs.shape[0],) or z.shape != (probs.shape[1],):
        raise ValueError(
            f"need next_probs [B, N], rewards [B] and support [N], got {probs.shape}, "
            f"{r.shape}, {z.shape}"
        )
    n, v_min, v_max = z.shape[0], z[0], z[-1]
    discount = np.broadcast_to(np.asarray(gamma, np.float64), r.shape) * ~term
    moved = np.clip(r[:, None] + discount[:, None] * z[None, :], v_min, v_max)
    position = (moved - v_min) / ((v_max - v_min) / (n - 1))
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, n - 1)
    upper_share = position - lower  # 0 where an atom lands on one exactly
    target = np.zeros_like(probs)
    rows = np.repeat(np.arange(probs.shape[0]), n)
    np.add.at(target, (rows, lower.ravel()), (probs * (1.0 - upper_share)).ravel())
    np.add.at(target, (rows, upper.ravel()), (probs * upper_share).ravel())
    return target


def _as_float(*arrays: ArrayLike) -> list[np.ndarray]:
    dtype = np.result_type(*(np.asarray(a) for a in arrays), np.float32)
    return [np.asarray(a, dtype=dtype) for a in arrays]


def _check_time_major(name: str, x: np.ndarray) -> None:
    if x.ndim < 1:
        raise ValueError(f"{name} must have a time axis, got shape {x.shape}")


def _check_same_shape(**arrays: np.ndarray) -> None:
    shapes = {name: a.shape for name, a in arrays.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shapes must match: {shapes}")
    for name, a in arrays.items():
        _check_time_major(name, a)
