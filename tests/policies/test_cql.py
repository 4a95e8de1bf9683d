"""CQL: its conservative term by its definition, and what it does to Q off the data."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.cql import CQLPolicy, CQLPolicyConfig
from hrl_tasks.policies.losses import cql_penalty


def test_the_penalty_is_the_mean_logsumexp_less_the_datas_q():
    torch.manual_seed(0)
    q_sampled, q_data = torch.randn(5, 7), torch.randn(5)
    expected = np.mean([np.log(np.sum(np.exp(row / 2.0))) * 2.0 - d
                        for row, d in zip(q_sampled.numpy(), q_data.numpy(), strict=True)])  # fmt: skip
    assert cql_penalty(q_sampled, q_data, 2.0).item() == pytest.approx(expected, rel=1e-5)


def narrow_data(policy, n=256, seed=0):
    """Transitions whose actions all lie in one narrow band (Box) or are all action 0
    (Discrete): what a conservative learner must not value elsewhere."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    if isinstance(policy.action_space, gym.spaces.Discrete):
        actions = np.zeros(n, np.int64)
    else:
        actions = rng.uniform(0.4, 0.6, (n, 1)).astype(np.float32)
    return SampleBatch({
        SampleBatch.OBS: obs, SampleBatch.ACTIONS: actions,
        SampleBatch.REWARDS: np.ones(n, np.float32),
        SampleBatch.NEXT_OBS: rng.normal(size=(n, 3)).astype(np.float32),
        SampleBatch.TERMINATEDS: np.ones(n, bool), SampleBatch.TRUNCATEDS: np.zeros(n, bool),
    })  # fmt: skip


@pytest.mark.parametrize("discrete", [False, True])
def test_q_off_the_recorded_actions_falls_below_q_on_them(discrete):
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (1,))
    policy = CQLPolicy(obs_space, action_space, CQLPolicyConfig(hidden=(32, 32), lr=3e-3, seed=0))
    penalties = []
    for step in range(150):
        info = policy.learn_on_batch(narrow_data(policy, seed=step))
        penalties.append(float(info["cql_penalty"]))
        if policy.target_due():
            policy.update_target()
    assert np.isfinite(info["loss_cql"]) and penalties[-1] < penalties[0]
    with torch.no_grad():
        obs = torch.as_tensor(narrow_data(policy, seed=999)[SampleBatch.OBS])
        if discrete:
            q1, _ = policy.model.critic(obs)
            assert (q1[:, 0] > q1[:, 1:].max(-1).values).float().mean() > 0.9
        else:
            on = policy.model.critic(obs, torch.full((len(obs), 1), 0.5))[0]
            off = policy.model.critic(obs, torch.full((len(obs), 1), -0.9))[0]
            assert (on > off + 0.5).float().mean() > 0.9
