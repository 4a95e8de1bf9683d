"""Golden tests: each estimator against a plain loop written from its definition."""

import numpy as np
import pytest

from hrl_tasks.policies.estimators import (
    discount_cumsum,
    gae,
    n_step_returns,
    n_step_targets,
    td_target_dqn,
    vtrace,
)

T = 12


@pytest.fixture
def traj():
    """A fixed random fragment with a termination at t=3 and a truncation at t=7."""
    rng = np.random.default_rng(42)
    terminateds = np.zeros(T, bool)
    truncateds = np.zeros(T, bool)
    terminateds[3] = True
    truncateds[7] = True
    return {
        "rewards_t": rng.normal(size=T),
        "values_t": rng.normal(size=T),
        "next_values_t": rng.normal(size=T),
        "terminateds_t": terminateds,
        "truncateds_t": truncateds,
    }


def test_discount_cumsum():
    np.testing.assert_allclose(discount_cumsum([1.0, 1.0, 1.0], 0.5), [1.75, 1.5, 1.0])
    x = np.random.default_rng(0).normal(size=(T, 3))
    ref = np.array([sum(0.9**k * x[t + k] for k in range(T - t)) for t in range(T)])
    np.testing.assert_allclose(discount_cumsum(x, 0.9), ref)


def gae_reference(rewards_t, values_t, next_values_t, terminateds_t, truncateds_t, gamma, lam):
    rewards, values, next_values = rewards_t, values_t, next_values_t
    terminateds, truncateds = terminateds_t, truncateds_t
    """A_t = sum_l (gamma lam)^l delta_{t+l}, summed forward until the episode or fragment ends."""
    n = len(rewards)
    adv = np.zeros(n)
    for t in range(n):
        for k in range(t, n):
            bootstrap = 0.0 if terminateds[k] else next_values[k]
            delta = rewards[k] + gamma * bootstrap - values[k]
            adv[t] += (gamma * lam) ** (k - t) * delta
            if terminateds[k] or truncateds[k]:
                break
    return adv, adv + values


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_matches_reference_loop(traj, lam):
    adv, targets = gae(**traj, gamma=0.9, lam=lam)
    ref_adv, ref_targets = gae_reference(**traj, gamma=0.9, lam=lam)
    np.testing.assert_allclose(adv, ref_adv)
    np.testing.assert_allclose(targets, ref_targets)


def test_gae_terminated_versus_truncated_by_hand():
    # gamma=0.5, lam=1, V(s_t)=0, r=1. Terminated at t=1: A_1 = 1, A_0 = 1 + 0.5 A_1 = 1.5,
    # A_2 = 1 + 0.5 * 5 (fragment end bootstraps) = 3.5.
    kw = dict(rewards_t=np.ones(3), values_t=np.zeros(3), gamma=0.5, lam=1.0)
    adv, _ = gae(
        **kw, next_values_t=[0.0, 4.0, 5.0], terminateds_t=[0, 1, 0], truncateds_t=[0, 0, 0]
    )
    np.testing.assert_allclose(adv, [1.5, 1.0, 3.5])
    # Truncated at t=1 instead: A_1 = 1 + 0.5 * V(final obs)=4 -> 3, A_0 = 1 + 0.5 * 3 = 2.5.
    adv, _ = gae(
        **kw, next_values_t=[0.0, 4.0, 5.0], terminateds_t=[0, 0, 0], truncateds_t=[0, 1, 0]
    )
    np.testing.assert_allclose(adv, [2.5, 3.0, 3.5])


def test_gae_does_not_leak_across_episodes(traj):
    adv, _ = gae(**traj, gamma=0.99, lam=0.95)
    changed = {k: v.copy() for k, v in traj.items()}
    changed["rewards_t"][4:] += 100.0  # the episodes after the termination at t=3
    adv2, _ = gae(**changed, gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv[:4], adv2[:4])
    assert not np.allclose(adv[4:], adv2[4:])


def test_gae_batch_axis_is_independent(traj):
    stacked = {k: np.stack([v, v[::-1]], axis=1) for k, v in traj.items()}
    adv, _ = gae(**stacked, gamma=0.9, lam=0.9)
    for j, col in enumerate([traj, {k: v[::-1] for k, v in traj.items()}]):
        np.testing.assert_allclose(adv[:, j], gae(**col, gamma=0.9, lam=0.9)[0])
    with pytest.raises(ValueError, match="shapes must match"):
        gae(np.ones(3), np.ones(3), np.ones(2), np.zeros(3), np.zeros(3), 0.9, 0.9)


def vtrace_reference(mu_logp, pi_logp, r, v, v_boot, gammas, rho_bar, c_bar, pg_rho_bar):
    """IMPALA eq. 1 as a direct double sum, with per-step discounts gamma_t."""
    n = len(r)
    ratio = np.exp(pi_logp - mu_logp)
    rho = np.minimum(rho_bar, ratio)
    c = np.minimum(c_bar, ratio)
    v_next = np.append(v[1:], v_boot)
    vs = np.zeros(n)
    for s in range(n):
        total = v[s]
        for t in range(s, n):
            coef = np.prod([gammas[i] * c[i] for i in range(s, t)])  # empty product = 1
            total += coef * rho[t] * (r[t] + gammas[t] * v_next[t] - v[t])
        vs[s] = total
    vs_next = np.append(vs[1:], v_boot)
    pg_adv = np.minimum(pg_rho_bar, ratio) * (r + gammas * vs_next - v)
    return vs, pg_adv


@pytest.mark.parametrize("thresholds", [(1.0, 1.0, 1.0), (0.8, 1.3, 2.0), (np.inf, np.inf, np.inf)])
def test_vtrace_matches_paper_definition(traj, thresholds):
    rng = np.random.default_rng(7)
    mu_logp = rng.normal(size=T) - 1.0
    pi_logp = mu_logp + rng.normal(scale=0.8, size=T)
    ratio = np.exp(pi_logp - mu_logp)
    assert (ratio > 1.3).any() and (ratio < 0.8).any()  # clipping is active
    gammas = 0.9 * ~traj["terminateds_t"]
    args = (mu_logp, pi_logp, traj["rewards_t"], traj["values_t"], np.float64(0.7), gammas)
    vs, pg_adv = vtrace(*args, *thresholds)
    ref_vs, ref_pg = vtrace_reference(*args, *thresholds)
    np.testing.assert_allclose(vs, ref_vs)
    np.testing.assert_allclose(pg_adv, ref_pg)


def test_vtrace_clipping_changes_the_result_and_none_disables_it(traj):
    rng = np.random.default_rng(8)
    mu_logp = rng.normal(size=T)
    pi_logp = mu_logp + rng.normal(size=T)
    args = (mu_logp, pi_logp, traj["rewards_t"], traj["values_t"], np.float64(0.0), np.full(T, 0.9))
    clipped = vtrace(*args)
    unclipped = vtrace(*args, None, None, None)
    np.testing.assert_allclose(unclipped[0], vtrace_reference(*args, np.inf, np.inf, np.inf)[0])
    assert not np.allclose(clipped[0], unclipped[0])


def test_vtrace_on_policy_is_the_n_step_return(traj):
    # rho = c = 1: v_s = sum_t gamma^{t-s} r_t + gamma^{T-s} V(x_T).
    logp = np.random.default_rng(9).normal(size=T)
    vs, _ = vtrace(
        logp, logp, traj["rewards_t"], traj["values_t"], np.float64(2.0), np.full(T, 0.9)
    )
    ref = discount_cumsum(traj["rewards_t"], 0.9) + 0.9 ** (T - np.arange(T)) * 2.0
    np.testing.assert_allclose(vs, ref)


def test_vtrace_batch_shapes():
    shape = (5, 3)
    ones = np.ones(shape)
    vs, pg = vtrace(ones, ones, ones, ones, np.zeros(3), np.full(shape, 0.5))
    assert vs.shape == pg.shape == shape
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace(ones, ones, ones, ones, np.zeros(5), ones)


def n_step_reference(rewards, next_values, terminateds, truncateds, gamma, n):
    targets = np.zeros(len(rewards))
    for t in range(len(rewards)):
        ret, disc = 0.0, 1.0
        for k in range(t, min(t + n, len(rewards))):
            ret += disc * rewards[k]
            disc *= gamma
            last = k
            if terminateds[k] or truncateds[k]:
                break
        targets[t] = ret + (0.0 if terminateds[last] else disc * next_values[last])
    return targets


@pytest.mark.parametrize("n", [1, 3, 20])
def test_n_step_targets_match_reference_loop(traj, n):
    got = n_step_targets(
        traj["rewards_t"],
        traj["next_values_t"],
        traj["terminateds_t"],
        0.9,
        n,
        traj["truncateds_t"],
    )
    ref = n_step_reference(
        traj["rewards_t"],
        traj["next_values_t"],
        traj["terminateds_t"],
        traj["truncateds_t"],
        0.9,
        n,
    )
    np.testing.assert_allclose(got, ref)


def test_n_step_returns_by_hand():
    # r = 1, gamma = 0.5, n = 3, terminated at t=2: t=0 sums r_0..r_2 = 1.75 and stops (D = 0).
    returns, discounts, last = n_step_returns(np.ones(5), [0, 0, 1, 0, 0], 0.5, 3)
    np.testing.assert_allclose(returns, [1.75, 1.5, 1.0, 1.5, 1.0])
    np.testing.assert_allclose(discounts, [0.0, 0.0, 0.0, 0.25, 0.5])
    np.testing.assert_array_equal(last, [2, 2, 2, 4, 4])


def test_n_step_batch_axis_is_independent(traj):
    cols = [traj, {k: v[::-1].copy() for k, v in traj.items()}]
    stacked = {k: np.stack([c[k] for c in cols], axis=1) for k in traj}
    got = n_step_targets(
        stacked["rewards_t"],
        stacked["next_values_t"],
        stacked["terminateds_t"],
        0.9,
        3,
        stacked["truncateds_t"],
    )
    for j, c in enumerate(cols):
        ref = n_step_reference(
            c["rewards_t"], c["next_values_t"], c["terminateds_t"], c["truncateds_t"], 0.9, 3
        )
        np.testing.assert_allclose(got[:, j], ref)


def test_td_target_dqn_and_double_dqn_by_hand():
    rewards = np.array([1.0, 2.0])
    q_target = np.array([[1.0, 3.0], [5.0, 0.0]])
    q_online = np.array([[2.0, 1.0], [0.0, 1.0]])
    terminateds = np.array([False, True])
    # DQN: 1 + 0.9 * max(1, 3) = 3.7; the terminated row is just its reward.
    np.testing.assert_allclose(td_target_dqn(rewards, q_target, terminateds, 0.9), [3.7, 2.0])
    # Double DQN: online argmax of row 0 is action 0, valued by the target net at 1.
    np.testing.assert_allclose(
        td_target_dqn(rewards, q_target, terminateds, 0.9, q_online), [1.9, 2.0]
    )
    with pytest.raises(ValueError):
        td_target_dqn(rewards, q_target[:1], terminateds, 0.9)
