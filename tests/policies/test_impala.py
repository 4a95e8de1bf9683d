import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import IMPALAPolicy, IMPALAPolicyConfig, gae
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

SPACES = {"discrete": cartpole_spaces, "continuous": pendulum_spaces}


def make(kind="discrete", **overrides):
    return IMPALAPolicy(*SPACES[kind](), IMPALAPolicyConfig(seed=0, **overrides))


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_on_policy_vtrace_targets_are_lambda_one_returns(kind):
    # With pi = mu, V-trace's vs are TD(1) targets: GAE(lambda=1) value targets,
    # including the bootstrap from next_values at the truncation and the fragment end.
    policy = make(kind, gamma=0.9)
    batch = fragment(policy, 24)
    _, targets = gae(
        batch["rewards"],
        batch["values"],
        batch["next_values"],
        batch["terminateds"],
        batch["truncateds"],
        0.9,
        1.0,
    )
    values = torch.from_numpy(batch["values"])
    terms = policy.loss(batch)
    expected = 0.5 * 0.5 * ((values - torch.from_numpy(targets.astype(np.float32))) ** 2).mean()
    torch.testing.assert_close(terms["loss_value"], expected, rtol=1e-5, atol=1e-6)
    assert terms["mean_rho"].item() == pytest.approx(1.0, abs=1e-6)


def test_concatenated_fragments_are_split_by_length():
    policy = make()
    fragments = [fragment(policy, 8, seed=s) for s in range(4)]
    joined = IMPALAPolicy(
        policy.observation_space,
        policy.action_space,
        IMPALAPolicyConfig(seed=0, rollout_fragment_length=8),
    )
    joined.set_weights(policy.get_weights())
    terms = joined.loss(SampleBatch.concat_samples(fragments))
    for name in ("loss_policy", "loss_value", "loss_entropy"):
        each = torch.stack([policy.loss(f)[name] for f in fragments]).mean()
        torch.testing.assert_close(terms[name], each, rtol=1e-5, atol=1e-6)
    # Read as one long fragment instead, the returns leak across fragment boundaries.
    assert policy.loss(SampleBatch.concat_samples(fragments))["loss_value"].item() != pytest.approx(
        terms["loss_value"].item(), rel=1e-3
    )
    with pytest.raises(ValueError, match="rollout_fragment_length=8"):
        joined.loss(fragments[0][:6])


def test_behaviour_logp_comes_from_the_batch():
    policy = make()
    batch = fragment(policy, 16)
    stale = batch.copy()
    stale["logp"] = batch["logp"] - 0.5  # the actors were less likely to pick these actions
    terms = policy.loss(stale)
    assert terms["mean_rho"].item() == pytest.approx(np.exp(0.5), rel=1e-5)
    # rho is clipped at 1, so the off-policy loss equals the on-policy one here.
    torch.testing.assert_close(terms["loss_value"], policy.loss(batch)["loss_value"])
    unclipped = make(clip_rho_threshold=None, clip_pg_rho_threshold=None, clip_c_threshold=None)
    assert unclipped.loss(stale)["loss_value"].item() != pytest.approx(
        unclipped.loss(batch)["loss_value"].item(), rel=1e-3
    )
    del stale["logp"]
    with pytest.raises(KeyError, match="logp"):
        policy.loss(stale)


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_learn_on_batch_reduces_the_loss(kind):
    policy = make(kind, lr=2e-3)
    batch = fragment(policy, 64)
    assert policy.postprocess_trajectory(batch) is batch
    before = policy.loss(batch)
    for _ in range(5):
        policy.learn_on_batch(batch)
    after = policy.loss(batch)
    assert after["total"].item() < before["total"].item()
    assert after["loss_value"].item() < before["loss_value"].item()
