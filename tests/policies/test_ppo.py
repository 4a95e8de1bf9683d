import numpy as np
import pytest

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig, gae
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

SPACES = {"discrete": cartpole_spaces, "continuous": pendulum_spaces}


def make(kind, **overrides):
    config = PPOPolicyConfig(**{"seed": 0, "minibatch_size": 32, "lr": 1e-3, **overrides})
    return PPOPolicy(*SPACES[kind](), config)


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_learn_on_batch_reduces_the_loss(kind):
    policy = make(kind)
    batch = policy.postprocess_trajectory(fragment(policy, 128))
    before = policy.loss(batch)
    # On fresh data ratio = 1: the surrogate is -mean(normalized A) = 0, and the KL is 0.
    assert before["loss_policy"].item() == pytest.approx(0.0, abs=1e-6)
    assert before["kl"].item() == pytest.approx(0.0, abs=1e-7)
    info = policy.learn_on_batch(batch)
    after = policy.loss(batch)
    assert info["num_sgd_steps"] == 4 * 4  # 4 epochs of 128 / 32 minibatches
    assert policy.num_grad_updates == 16
    assert after["loss_policy"].item() < -0.005
    assert after["loss_value"].item() < before["loss_value"].item()
    assert after["total"].item() < before["total"].item()
    assert 0.0 < after["kl"].item() < 0.2 and info["kl"] > 0.0
    assert 0.0 < after["clip_fraction"].item() <= 1.0


def test_postprocess_is_gae_with_lambda():
    policy = make("discrete", lam=0.8, gamma=0.9)
    raw = fragment(policy, 40)
    batch = policy.postprocess_trajectory(raw)
    expected, _ = gae(
        raw["rewards"],
        raw["values"],
        raw["next_values"],
        raw["terminateds"],
        raw["truncateds"],
        0.9,
        0.8,
    )
    np.testing.assert_allclose(batch[SampleBatch.ADVANTAGES], expected, rtol=1e-6)


def test_target_kl_stops_after_the_first_epoch():
    policy = make("discrete", target_kl=1e-9)
    batch = policy.postprocess_trajectory(fragment(policy, 128))
    assert policy.learn_on_batch(batch)["num_sgd_steps"] == 4


def test_advantage_normalization_is_per_minibatch():
    policy = make("discrete")
    batch = policy.postprocess_trajectory(fragment(policy, 64))
    shifted = batch.copy()
    shifted["advantages"] = 10.0 * batch["advantages"] + 3.0  # same after standardizing
    np.testing.assert_allclose(
        policy.loss(shifted)["loss_policy"].item(),
        policy.loss(batch)["loss_policy"].item(),
        atol=1e-6,
    )
    raw = make("discrete", normalize_advantages=False)
    assert raw.loss(shifted)["loss_policy"].item() != pytest.approx(
        raw.loss(batch)["loss_policy"].item(), abs=1e-3
    )


def test_value_clipping_reads_old_values():
    policy = make("continuous", vf_clip=0.1)
    batch = policy.postprocess_trajectory(fragment(policy, 32))
    far = batch.copy()
    far["values"] = batch["values"] + 5.0  # the clipped branch moves away from the targets
    assert policy.loss(far)["loss_value"].item() > policy.loss(batch)["loss_value"].item()
    del far["values"]
    with pytest.raises(KeyError, match="values"):
        policy.loss(far)


@pytest.mark.parametrize("optimizer_built", [True, False])
def test_a_restored_state_keeps_its_moments_and_trains_with_the_new_learning_rate(
    optimizer_built,
):
    # Population based training restores a checkpoint into a config with another lr.
    trained = make("discrete")
    trained.learn_on_batch(trained.postprocess_trajectory(fragment(trained, 64)))
    state = trained.get_state()
    restored = make("discrete", lr=2.5e-4)
    if optimizer_built:
        restored.optimizer  # noqa: B018 (built before the state is loaded)
    restored.set_state(state)
    assert [g["lr"] for g in restored.optimizer.param_groups] == [2.5e-4]
    moments = restored.optimizer.state_dict()["state"]
    steps = trained.num_grad_updates
    assert moments and all(int(s["step"]) == steps for s in moments.values())
