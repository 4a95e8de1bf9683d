import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig, n_step_returns
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces, transitions


def make(**overrides):
    return DQNPolicy(*cartpole_spaces(), DQNPolicyConfig(seed=0, **overrides))


def q_values(policy, model, obs):
    with torch.no_grad():
        return model(torch.from_numpy(obs)).numpy()


def test_learn_on_batch_reduces_the_loss_and_reports_td_errors():
    policy = make(lr=1e-3)
    batch = transitions(policy, 64)
    before = policy.loss(batch)["total"].item()
    for _ in range(10):
        info = policy.learn_on_batch(batch)
    assert policy.loss(batch)["total"].item() < 0.8 * before
    assert info["td_error"].shape == (64,) and info["td_error"].dtype == np.float32
    assert isinstance(info["q_mean"], float)


def test_double_q_target_and_importance_weights_by_hand():
    policy = make(gamma=0.9)
    batch = transitions(policy, 16)
    policy.learn_on_batch(batch)  # online and target networks now differ
    q = q_values(policy, policy.model, batch["obs"])
    next_online = q_values(policy, policy.model, batch["next_obs"])
    next_target = q_values(policy, policy.target_model, batch["next_obs"])
    best = next_online.argmax(1)
    targets = batch["rewards"] + 0.9 * ~batch["terminateds"] * next_target[np.arange(16), best]
    td_error = q[np.arange(16), batch["actions"]] - targets
    weights = np.linspace(0.1, 1.0, 16).astype(np.float32)
    weighted = batch.copy()
    weighted[SampleBatch.WEIGHTS] = weights
    terms = policy.loss(weighted)
    np.testing.assert_allclose(terms["td_error"].numpy(), td_error, rtol=1e-5, atol=1e-6)
    huber = np.where(np.abs(td_error) < 1, 0.5 * td_error**2, np.abs(td_error) - 0.5)
    assert terms["loss_td"].item() == pytest.approx(np.mean(weights * huber), rel=1e-5)
    # Without double Q the target takes the target network's own max.
    plain = make(gamma=0.9, double_q=False)
    plain.set_state(policy.get_state())
    expected = batch["rewards"] + 0.9 * ~batch["terminateds"] * next_target.max(1)
    np.testing.assert_allclose(
        plain.loss(batch)["td_error"].numpy(),
        q[np.arange(16), batch["actions"]] - expected,
        rtol=1e-5,
        atol=1e-6,
    )


def test_update_target_copies_or_averages():
    policy = make(lr=1e-2)
    policy.learn_on_batch(transitions(policy, 32))
    online = policy.get_weights()
    old_target = {k: v.detach().numpy().copy() for k, v in policy.target_model.state_dict().items()}
    assert any(not np.array_equal(online[k], old_target[k]) for k in online)
    policy.update_target(tau=0.25)
    for k, v in policy.target_model.state_dict().items():
        np.testing.assert_allclose(
            v.numpy(), 0.25 * online[k] + 0.75 * old_target[k], rtol=1e-5, atol=1e-7
        )
    policy.update_target()
    for k, v in policy.target_model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), online[k])
    assert policy.num_target_updates == 2
    with pytest.raises(ValueError, match="tau"):
        policy.update_target(tau=0.0)


def test_epsilon_greedy():
    policy = make(epsilon=0.0)
    obs = np.random.default_rng(1).normal(size=(2000, 4)).astype(np.float32)
    greedy = q_values(policy, policy.model, obs).argmax(1)
    np.testing.assert_array_equal(policy.compute_actions(obs)[0], greedy)
    policy.set_epsilon(1.0)
    explored, _ = policy.compute_actions(obs)
    assert explored.mean() == pytest.approx(0.5, abs=0.05)
    assert (explored != greedy).mean() == pytest.approx(0.5, abs=0.05)
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0], greedy)
    with pytest.raises(ValueError, match="epsilon"):
        policy.set_epsilon(1.5)
    state = policy.get_state()
    restored = make(epsilon=0.3)
    restored.set_state(state)
    assert restored.epsilon == 1.0


def test_n_step_postprocess():
    policy = make(n_step=3, gamma=0.9)
    raw = fragment(policy, 12)  # terminated at t=4, truncated at t=8
    batch = policy.postprocess_trajectory(raw)
    returns, discounts, last = n_step_returns(
        raw["rewards"], raw["terminateds"], 0.9, 3, raw["truncateds"]
    )
    np.testing.assert_allclose(batch["rewards"], returns, rtol=1e-6)
    np.testing.assert_allclose(batch["discounts"], discounts, rtol=1e-6)
    np.testing.assert_array_equal(batch["next_obs"], raw["next_obs"][last])
    np.testing.assert_array_equal(batch["terminateds"], raw["terminateds"][last])
    assert list(last[:6]) == [2, 3, 4, 4, 4, 7]
    # The loss then bootstraps with the per-row discounts instead of gamma.
    q_next = q_values(policy, policy.target_model, batch["next_obs"])
    q_next_online = q_values(policy, policy.model, batch["next_obs"])
    q = q_values(policy, policy.model, batch["obs"])[np.arange(12), batch["actions"]]
    v_next = q_next[np.arange(12), q_next_online.argmax(1)]
    np.testing.assert_allclose(
        policy.loss(batch)["td_error"].numpy(),
        q - (returns + discounts * v_next),
        rtol=1e-5,
        atol=1e-6,
    )
    assert make().postprocess_trajectory(raw) is raw


def test_rejects_continuous_actions_and_bad_n_step():
    with pytest.raises(TypeError, match="Discrete"):
        DQNPolicy(*pendulum_spaces())
    with pytest.raises(ValueError, match="n_step"):
        make(n_step=0)
