"""Rewards scaled by the running spread of the discounted return, as VecNormalize(norm_reward=True)."""

import numpy as np

from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import RolloutWorker
from hrl_tasks.rollout.reward_scaling import RewardScaler
from tests.policies.synthetic import pendulum_spaces


def plain(rewards, ended, gamma, clip=10.0, eps=1e-8):
    """Step by step with every return kept: the population std of all returns so far."""
    returns, seen, out = np.zeros(rewards.shape[1]), [], []
    for r, e in zip(rewards, ended, strict=True):
        returns = returns * gamma + r
        seen.extend(returns)
        out.append(np.clip(r / np.sqrt(np.var(seen) + eps), -clip, clip))
        returns = np.where(e, 0.0, returns)
    return np.array(out, np.float32)


def test_the_scaler_divides_by_the_spread_of_every_return_so_far_across_fragments():
    rng = np.random.default_rng(0)
    rewards = rng.normal(1.0, 2.0, (60, 3))
    ended = rng.random((60, 3)) < 0.05
    scaler = RewardScaler(3, gamma=0.99)
    got = np.concatenate([scaler(rewards[:25], ended[:25]), scaler(rewards[25:], ended[25:])])
    np.testing.assert_allclose(got, plain(rewards, ended, 0.99), rtol=1e-5, atol=1e-6)
    assert np.abs(got).max() <= 10.0  # the first step's spread is zero: clipped


def test_a_worker_learns_from_scaled_rewards_and_reports_the_envs_returns():
    policy = PPOPolicy(
        *pendulum_spaces(), PPOPolicyConfig(seed=0, normalize_rewards=True, gamma=0.99)
    )
    worker = RolloutWorker("Pendulum-v1", policy.inference_copy(), num_envs=2,
                           rollout_fragment_length=200, seed=0)  # fmt: skip
    batch, metrics = worker.sample()
    plain_worker = RolloutWorker("Pendulum-v1", PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(seed=0))
                                 .inference_copy(), num_envs=2, rollout_fragment_length=200,
                                 seed=0)  # fmt: skip
    raw, raw_metrics = plain_worker.sample()
    np.testing.assert_allclose(metrics["episode_returns"], raw_metrics["episode_returns"])
    assert len(metrics["episode_returns"]) == 2  # Pendulum's episodes are 200 steps
    assert raw["rewards"].min() < -5 and np.abs(batch["rewards"]).max() <= 10.0
    assert np.std(batch["rewards"]) < np.std(raw["rewards"]) / 5
