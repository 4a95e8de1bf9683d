"""Off-policy estimates: exact where the answer is known, unbiased on a bandit."""

import numpy as np
import pytest

from hrl_tasks.policies.off_policy_estimation import (
    doubly_robust,
    importance_sampling,
    split_episodes,
    weighted_importance_sampling,
)


def episode(rewards, logp, target_logp, **more):
    return {"rewards": np.asarray(rewards, float), "logp": np.asarray(logp, float),
            "target_logp": np.asarray(target_logp, float),
            **{k: np.asarray(v, float) for k, v in more.items()}}  # fmt: skip


def test_with_the_behaviour_policy_as_target_every_estimate_is_the_discounted_return():
    rng = np.random.default_rng(0)
    episodes = []
    for length in (3, 5, 8):
        logp = np.log(rng.uniform(0.2, 0.9, length))
        q = rng.normal(size=length)
        episodes.append(episode(rng.normal(size=length), logp, logp, q=q, v=q))
    gamma = 0.9
    returns = [sum(gamma**t * r for t, r in enumerate(e["rewards"])) for e in episodes]
    for estimate in (importance_sampling, weighted_importance_sampling, doubly_robust):
        assert estimate(episodes, gamma) == pytest.approx(np.mean(returns), rel=1e-9)


def bandit(n, seed):
    """One-step episodes: the behaviour picks each of 2 arms with 1/2, arm 1 pays 1."""
    rng = np.random.default_rng(seed)
    arms = rng.integers(2, size=n)
    target = np.where(arms == 1, 0.9, 0.1)  # the target picks arm 1 with 0.9: worth 0.9
    return [episode([float(a)], [np.log(0.5)], [np.log(p)], q=[float(a)], v=[0.9])
            for a, p in zip(arms, target, strict=True)]  # fmt: skip


def test_on_a_bandit_the_estimates_find_the_targets_value():
    episodes = bandit(20_000, seed=1)
    assert importance_sampling(episodes, 1.0) == pytest.approx(0.9, abs=0.02)
    assert weighted_importance_sampling(episodes, 1.0) == pytest.approx(0.9, abs=0.02)
    # with the exact values every episode's doubly robust estimate is exactly 0.9
    assert doubly_robust(episodes[:10], 1.0) == pytest.approx(0.9, abs=1e-12)


def test_episodes_without_the_behaviours_log_probabilities_are_refused_in_one_line():
    bare = [{"rewards": np.ones(3), "target_logp": np.zeros(3)}]
    with pytest.raises(ValueError, match="episode 0 has no 'logp'") as refused:
        importance_sampling(bare, 0.99)
    assert "\n" not in str(refused.value)


def test_rows_split_into_episodes_in_step_order():
    rows = {"eps_id": np.array([5, 2, 5, 2, 2]), "t": np.array([1, 2, 0, 0, 1]),
            "rewards": np.arange(5.0)}  # fmt: skip
    episodes = split_episodes(rows)
    assert [list(e["t"]) for e in episodes] == [[0, 1, 2], [0, 1]]
    assert [list(e["rewards"]) for e in episodes] == [[3.0, 4.0, 1.0], [2.0, 0.0]]


def test_fitted_q_evaluation_learns_a_bandits_values_and_feeds_the_doubly_robust_estimate():
    from hrl_tasks.policies.fqe import FittedQEvaluation

    rng = np.random.default_rng(0)
    n = 2000
    actions = rng.integers(2, size=n)
    rows = {"obs": rng.normal(size=(n, 2)).astype(np.float32), "actions": actions,
            "rewards": actions.astype(np.float32), "next_obs": np.zeros((n, 2), np.float32),
            "terminateds": np.ones(n, bool)}  # fmt: skip
    target = np.tile([0.1, 0.9], (n, 1))  # the target picks arm 1 with 0.9: worth 0.9
    fqe = FittedQEvaluation(2, 2, gamma=0.99, seed=0)
    fqe.fit(rows, target, steps=400)
    q = fqe.q_values(rows["obs"])
    np.testing.assert_allclose(q.mean(0), [0.0, 1.0], atol=0.05)
    episodes = [episode([r], [np.log(0.5)], [np.log(target[i, a])], q=[q[i, a]],
                        v=[(target[i] * q[i]).sum()])
                for i, (a, r) in enumerate(zip(actions, rows["rewards"], strict=True))]  # fmt: skip
    assert doubly_robust(episodes, 0.99) == pytest.approx(0.9, abs=0.03)


def test_continuous_fitted_q_evaluation_learns_values_of_box_actions_and_bootstraps():
    from hrl_tasks.policies.fqe import ContinuousFittedQEvaluation

    # Two states: in A (obs 0) nothing happens and B follows; in B (obs 1) the reward
    # is the action, then the episode ends. The target policy draws 0.6 in B.
    rng = np.random.default_rng(0)
    n = 2000
    in_b = rng.random(n) < 0.5
    actions = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    rows = {"obs": in_b[:, None].astype(np.float32), "actions": actions,
            "rewards": np.where(in_b, actions[:, 0], 0.0).astype(np.float32),
            "next_obs": np.ones((n, 1), np.float32), "terminateds": in_b}  # fmt: skip
    drawn = np.full((n, 4, 1), 0.6, np.float32)
    fqe = ContinuousFittedQEvaluation(1, 1, gamma=0.9, seed=0)
    fqe.fit(rows, drawn, steps=1500)
    probe = np.array([[-0.5], [0.0], [0.5]], np.float32)[None].repeat(2, 0)
    q = fqe.q_values(np.array([[0.0], [1.0]], np.float32), probe)
    np.testing.assert_allclose(q[1], [-0.5, 0.0, 0.5], atol=0.1)  # B: the action itself
    np.testing.assert_allclose(q[0], [0.9 * 0.6] * 3, atol=0.1)  # A: gamma times B's value


def test_weighted_importance_sampling_sees_how_long_the_targets_episodes_last():
    # Reward 1 a step; at each step the episode ends with the action "stop". The
    # behaviour stops with 1/2, the target with 1/4: the target's episodes last longer.
    rng = np.random.default_rng(0)
    gamma, episodes = 0.9, []
    for _ in range(20_000):
        stops = []
        while not stops or not stops[-1]:
            stops.append(rng.random() < 0.5)
        logp = np.full(len(stops), np.log(0.5))
        target = np.log(np.where(stops, 0.25, 0.75))
        episodes.append(episode(np.ones(len(stops)), logp, target))
    # V = 1 + gamma (3/4) V for the target: 1 / (1 - 0.675); the behaviour's is 1 / 0.55
    truth = 1 / (1 - gamma * 0.75)
    assert weighted_importance_sampling(episodes, gamma) == pytest.approx(truth, rel=0.03)
    assert importance_sampling(episodes, gamma) == pytest.approx(truth, rel=0.03)
