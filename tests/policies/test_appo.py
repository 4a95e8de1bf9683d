import dataclasses

import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import (
    APPOPolicy,
    APPOPolicyConfig,
    IMPALAPolicy,
    IMPALAPolicyConfig,
    clipped_surrogate_loss,
    vtrace,
)
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

SPACES = {"discrete": cartpole_spaces, "continuous": pendulum_spaces}


def make(kind="discrete", **overrides):
    return APPOPolicy(*SPACES[kind](), APPOPolicyConfig(seed=0, **overrides))


def impala_twin(policy: APPOPolicy) -> IMPALAPolicy:
    """An IMPALA policy with the same weights and the keys the two configs share."""
    shared = {
        f.name: getattr(policy.config, f.name) for f in dataclasses.fields(IMPALAPolicyConfig)
    }
    twin = IMPALAPolicy(policy.observation_space, policy.action_space, IMPALAPolicyConfig(**shared))
    twin.set_weights(policy.get_weights())
    return twin


def gradients(policy, loss: torch.Tensor) -> list[torch.Tensor]:
    return torch.autograd.grad(loss, policy.params, allow_unused=True, materialize_grads=True)


def stale(batch: SampleBatch, shift: float) -> SampleBatch:
    """The batch as actors whose ``log mu`` was ``shift`` lower made it (``pi / mu = e^shift``)."""
    out = batch.copy()
    out["logp"] = batch["logp"] - np.float32(shift)
    return out


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_on_policy_the_surrogate_gradient_is_impalas_policy_gradient(kind):
    policy = make(kind, gamma=0.9)
    impala = impala_twin(policy)
    batch = fragment(policy, 24)
    terms, expected = policy.loss(batch), impala.loss(batch)
    assert terms["mean_rho"].item() == pytest.approx(1.0, abs=1e-6)
    assert terms["clip_fraction"].item() == 0.0
    for name in ("loss_value", "loss_entropy"):
        torch.testing.assert_close(terms[name], expected[name])
    for ours, theirs in zip(
        gradients(policy, terms["loss_policy"]),
        gradients(impala, expected["loss_policy"]),
        strict=True,
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_advantages_are_vtraces_against_the_behaviour_logp():
    """Golden: the surrogate on ``pg_advantages`` of `estimators.vtrace` computed here from
    the columns (no truncation inside the fragment, so rewards and discounts are plain)."""
    policy = make(gamma=0.9, clip=0.1)
    batch = stale(fragment(policy, 16), 0.3)
    batch["truncateds"] = np.zeros(len(batch), bool)
    dist, values, logp = policy.forward_batch(batch)
    done = batch["terminateds"]
    vs, advantages = vtrace(
        behaviour_logp=batch["logp"],
        target_logp=logp.detach().numpy(),
        rewards=batch["rewards"],
        values=values.detach().numpy(),
        bootstrap_value=batch["next_values"][-1],
        discounts=0.9 * ~done,
    )
    old_logp = torch.from_numpy(batch["logp"])
    expected = clipped_surrogate_loss(logp, old_logp, torch.from_numpy(advantages).float(), 0.1)
    terms = policy.loss(batch)
    torch.testing.assert_close(terms["loss_policy"], expected)
    target = torch.from_numpy(vs).float()
    torch.testing.assert_close(terms["loss_value"], 0.5 * 0.5 * ((values - target) ** 2).mean())
    assert terms["mean_rho"].item() == pytest.approx(np.exp(0.3), rel=1e-5)
    assert terms["clip_fraction"].item() == 1.0


@pytest.mark.parametrize("shift", [1.0, -1.0], ids=["ratio-above", "ratio-below"])
def test_clipping_stops_the_gradient_where_the_ratio_left_the_range_in_its_favour(shift):
    # ratio e^shift is outside [1 - clip, 1 + clip] everywhere: a row adds gradient
    # only where its unclipped term is the smaller one (A < 0 above, A > 0 below).
    policy = make(clip=0.2)
    batch = stale(fragment(policy, 32), shift)
    tm = policy.time_major(batch)
    _, values, logp = policy.forward_batch(tm)
    _, advantages = policy.vtrace_targets(tm, values, logp)
    ratio = torch.exp(logp - torch.from_numpy(tm["logp"]))
    kept = advantages < 0 if shift > 0 else advantages > 0
    assert 0 < int(kept.sum()) < len(kept)
    expected = -(ratio * advantages * kept).sum() / len(kept)
    loss = policy.loss(batch)["loss_policy"]
    for ours, theirs in zip(gradients(policy, loss), gradients(policy, expected), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_learn_on_batch_takes_num_sgd_iter_steps_and_reduces_the_loss(kind):
    policy = make(kind, lr=2e-3, num_sgd_iter=3)
    batch = fragment(policy, 64)
    before = policy.loss(batch)
    info = policy.learn_on_batch(batch)
    assert info["num_sgd_steps"] == 3.0 and policy.num_grad_updates == 3
    assert {"loss_policy", "loss_value", "clip_fraction", "mean_rho", "grad_norm"} <= set(info)
    after = policy.loss(batch)
    assert after["total"].item() < before["total"].item()
    assert after["mean_rho"].item() != pytest.approx(1.0, abs=1e-4)  # the steps moved pi off mu


def test_config_is_checked():
    with pytest.raises(TypeError, match="APPOPolicyConfig"):
        APPOPolicy(*cartpole_spaces(), IMPALAPolicyConfig())
