"""IQL: its losses by their definitions, the value it learns, and the policy it extracts."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.iql import IQLPolicy, IQLPolicyConfig
from hrl_tasks.policies.losses import advantage_weights, expectile_loss


def expectile(values: np.ndarray, tau: float) -> float:
    """The ``tau``-expectile of ``values``: the root of ``sum(|tau - 1(x < m)| (x - m))``,
    by bisection."""
    low, high = float(values.min()), float(values.max())
    for _ in range(60):
        m = (low + high) / 2
        weights = np.where(values < m, 1 - tau, tau)
        low, high = (m, high) if np.sum(weights * (values - m)) > 0 else (low, m)
    return (low + high) / 2


def test_the_expectile_loss_is_its_definition_and_is_least_at_the_expectile():
    rng = np.random.default_rng(0)
    diff = rng.normal(size=50)
    expected = np.mean(np.where(diff < 0, 0.3, 0.7) * diff**2)
    got = expectile_loss(torch.as_tensor(diff), 0.7).item()
    assert got == pytest.approx(expected, rel=1e-6)
    values = rng.exponential(size=200)
    grid = np.linspace(values.min(), values.max(), 2001)
    for tau in (0.5, 0.7, 0.9):
        losses = [expectile_loss(torch.as_tensor(values - m), tau).item() for m in grid]
        best = grid[int(np.argmin(losses))]
        assert best == pytest.approx(expectile(values, tau), abs=2e-3)
    assert expectile(values, 0.5) == pytest.approx(values.mean(), abs=1e-6)


def test_the_actors_weights_grow_with_the_advantage_and_are_clipped():
    advantages = torch.tensor([-1.0, 0.0, 0.5, 10.0])
    weights = advantage_weights(advantages, beta=2.0, max_weight=20.0)
    expected = np.minimum(np.exp(2.0 * advantages.numpy()), 20.0)
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6)


def bandit(policy, n=256, seed=0):
    """One state, transitions that end at once: action ``k`` (of 3, or a Box action in
    [-1, 1]) recorded uniformly, rewarded ``k`` (Discrete) or ``-4 (a - 0.5)^2`` (Box)."""
    rng = np.random.default_rng(seed)
    obs = np.ones((n, 3), np.float32)
    if isinstance(policy.action_space, gym.spaces.Discrete):
        actions = rng.integers(0, 3, n)
        rewards = actions.astype(np.float32)
    else:
        actions = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
        rewards = (-4 * (actions[:, 0] - 0.5) ** 2).astype(np.float32)
    return SampleBatch({
        SampleBatch.OBS: obs, SampleBatch.ACTIONS: actions, SampleBatch.REWARDS: rewards,
        SampleBatch.NEXT_OBS: obs, SampleBatch.TERMINATEDS: np.ones(n, bool),
        SampleBatch.TRUNCATEDS: np.zeros(n, bool),
    })  # fmt: skip


def trained(discrete: bool, steps: int, **config) -> IQLPolicy:
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (1,))
    cfg = IQLPolicyConfig(hidden=(32, 32), lr=3e-3, tau=0.05, seed=0, **config)
    policy = IQLPolicy(obs_space, action_space, cfg)
    for step in range(steps):
        policy.learn_on_batch(bandit(policy, seed=step))
        policy.update_target()
    return policy


def test_v_learns_the_expectile_of_the_recorded_actions_values():
    policy = trained(discrete=True, steps=400, expectile=0.9)
    with torch.no_grad():
        v = policy.model.value(torch.ones(1, 3)).item()
        q1, q2 = policy.model.critic(torch.ones(1, 3))
    np.testing.assert_allclose(q1[0].numpy(), [0, 1, 2], atol=0.1)  # Q of each action: its reward
    # V: the 0.9-expectile of Q over the recorded actions (0, 1, 2 alike), above their mean
    assert v == pytest.approx(expectile(np.array([0.0, 1.0, 2.0]), 0.9), abs=0.1)
    assert v > 1.3


@pytest.mark.parametrize("discrete", [True, False])
def test_the_extracted_policy_takes_the_best_recorded_action(discrete):
    policy = trained(discrete, steps=400, beta=10.0)
    actions, _ = policy.compute_actions(np.ones((4, 3), np.float32), explore=False)
    if discrete:
        assert list(actions) == [2, 2, 2, 2]  # BC would take each action a third of the time
    else:
        np.testing.assert_allclose(actions[:, 0], 0.5, atol=0.15)  # BC's mean: 0


def test_box_log_densities_and_samples_are_in_the_envs_units():
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    policy = IQLPolicy(obs_space, gym.spaces.Box(-2.0, 2.0, (1,)), IQLPolicyConfig(seed=0))
    obs = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    actions = np.linspace(-1.9, 1.9, 6, dtype=np.float32)[:, None]
    got = policy.action_logp(SampleBatch({"obs": obs, "actions": actions}))
    with torch.no_grad():
        mean, std = policy._gaussian(policy.obs_features(obs))
    env_mean, env_std = 2.0 * mean.numpy()[:, 0], 2.0 * std.numpy()[:, 0]  # a unit is 2 env units
    expected = -0.5 * ((actions[:, 0] - env_mean) / env_std) ** 2 - np.log(
        env_std * np.sqrt(2 * np.pi)
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    drawn = policy.sample_actions(obs, 50)
    assert drawn.shape == (6, 50, 1) and np.all(np.abs(drawn) <= 2.0) and drawn.std() > 0.5
