import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import PGPolicy, PGPolicyConfig, gae
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces


@pytest.fixture
def policy():
    return PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0, lam=0.9))


def test_postprocess_adds_gae_columns(policy):
    raw = fragment(policy, 32)
    batch = policy.postprocess_trajectory(raw)
    advantages, targets = gae(
        raw["rewards"],
        raw["values"],
        raw["next_values"],
        raw["terminateds"],
        raw["truncateds"],
        0.99,
        0.9,
    )
    np.testing.assert_allclose(batch[SampleBatch.ADVANTAGES], advantages, rtol=1e-6)
    np.testing.assert_allclose(batch[SampleBatch.VALUE_TARGETS], targets, rtol=1e-6)
    assert batch[SampleBatch.ADVANTAGES].dtype == np.float32
    assert set(batch.columns) == set(raw.columns) | {"advantages", "value_targets"}
    assert "advantages" not in raw  # the input is not modified
    del raw[SampleBatch.NEXT_VALUES]
    with pytest.raises(KeyError, match="next_values"):
        policy.postprocess_trajectory(raw)


def test_without_critic_advantages_are_discounted_returns():
    policy = PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0, use_critic=False, gamma=0.5))
    raw = fragment(policy, 9)  # terminated at t=3, truncated at t=6
    batch = policy.postprocess_trajectory(raw)
    r = raw["rewards"]
    expected = np.zeros(9)
    for start, stop in ((0, 4), (4, 7), (7, 9)):
        for t in range(start, stop):
            expected[t] = sum(0.5 ** (k - t) * r[k] for k in range(t, stop))
    np.testing.assert_allclose(batch[SampleBatch.ADVANTAGES], expected, rtol=1e-6)
    assert "loss_value" not in policy.loss(batch)


def test_loss_terms_by_hand(policy):
    batch = policy.postprocess_trajectory(fragment(policy, 32))
    terms = policy.loss(batch)
    logp = torch.from_numpy(batch["logp"])  # behaviour logp = current logp on fresh data
    advantages = torch.from_numpy(batch["advantages"])
    torch.testing.assert_close(terms["loss_policy"], -(logp * advantages).mean())
    values = torch.from_numpy(batch["values"])
    targets = torch.from_numpy(batch["value_targets"])
    torch.testing.assert_close(terms["loss_value"], 0.5 * 0.5 * ((values - targets) ** 2).mean())
    torch.testing.assert_close(terms["loss_entropy"], -0.01 * terms["entropy"])


@pytest.mark.parametrize("spaces", [cartpole_spaces, pendulum_spaces])
def test_learning_reduces_the_loss(spaces):
    policy = PGPolicy(*spaces(), PGPolicyConfig(seed=0, lr=3e-3))
    batch = policy.postprocess_trajectory(fragment(policy, 64))
    before = policy.loss(batch)
    for _ in range(10):
        info = policy.learn_on_batch(batch)
    after = policy.loss(batch)
    assert after["total"].item() < before["total"].item() - 0.05
    assert after["loss_policy"].item() < before["loss_policy"].item()
    assert after["loss_value"].item() < before["loss_value"].item()
    assert policy.num_grad_updates == 10 and info["grad_norm"] > 0
