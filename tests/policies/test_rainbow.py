"""Rainbow's two parts beyond DQN's: C51's distribution over returns and noisy layers."""

import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig
from hrl_tasks.policies.estimators import categorical_projection
from hrl_tasks.policies.models import NoisyLinear, QNetwork
from tests.policies.synthetic import cartpole_spaces, transitions


def by_definition(probs, reward, terminated, gamma, support):
    """Algorithm 1 of Bellemare et al. 2017, one atom at a time."""
    v_min, v_max, n = support[0], support[-1], len(support)
    spacing = (v_max - v_min) / (n - 1)
    target = np.zeros(n)
    for j, z in enumerate(support):
        moved = min(max(reward + (0.0 if terminated else gamma) * z, v_min), v_max)
        b = (moved - v_min) / spacing
        low, high = int(np.floor(b)), int(np.ceil(b))
        if low == high:
            target[low] += probs[j]
        else:
            target[low] += probs[j] * (high - b)
            target[high] += probs[j] * (b - low)
    return target


def test_the_projection_is_algorithm_1_of_c51():
    rng = np.random.default_rng(0)
    support = np.linspace(-5.0, 5.0, 11)
    probs = rng.dirichlet(np.ones(11), size=32)
    rewards = rng.uniform(-3, 3, size=32)
    rewards[:4] = [0.5, 7.0, -9.0, 1.0]  # between atoms, past each end, on an atom
    terminateds = rng.random(32) < 0.3
    gammas = rng.uniform(0.5, 1.0, size=32)  # n-step discounts, one per row
    found = categorical_projection(probs, rewards, terminateds, gammas, support)
    for row in range(32):
        expected = by_definition(probs[row], rewards[row], terminateds[row], gammas[row], support)
        np.testing.assert_allclose(found[row], expected, atol=1e-6)
    np.testing.assert_allclose(found.sum(axis=1), 1.0, atol=1e-6)
    # A terminal row is the reward alone, split between its two atoms.
    alone = categorical_projection(probs[:1], [0.5], [True], 0.99, support)[0]
    assert alone[5] == pytest.approx(0.5) and alone[6] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="support"):
        categorical_projection(probs, rewards, terminateds, 0.9, support[:5])


def test_noisy_layers_draw_fresh_noise_and_act_on_their_means_without_it():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 4, sigma0=0.5)
    assert torch.allclose(layer.weight_sigma, torch.full((4, 16), 0.5 / 4))
    assert layer.weight_mu.abs().max() <= 0.25
    x = torch.randn(3, 16)
    layer.generator = torch.Generator().manual_seed(1)
    first, second = layer(x), layer(x)
    assert not torch.allclose(first, second)  # fresh noise per pass
    layer.generator = torch.Generator().manual_seed(1)
    assert torch.allclose(layer(x), first)  # from its generator
    layer.noisy = False
    means = x @ layer.weight_mu.T + layer.bias_mu
    assert torch.allclose(layer(x), means) and torch.allclose(layer(x), means)


def test_a_distributional_q_is_the_mean_of_its_distribution():
    net = QNetwork(torch.nn.Flatten(), 4, 3, (8,), num_atoms=7, v_min=-3.0, v_max=3.0)
    obs = torch.randn(5, 4)
    probs = net.logits(obs).softmax(-1)
    assert probs.shape == (5, 3, 7)
    expected = (probs * torch.linspace(-3, 3, 7)).sum(-1)
    assert torch.allclose(net(obs), expected, atol=1e-6)
    # One atom is DQN's network, with the same weights' names (the numpy acting copy's).
    scalar = QNetwork(torch.nn.Flatten(), 4, 3, (8,))
    assert set(scalar.state_dict()) == {
        "trunk.0.0.weight", "trunk.0.0.bias", "advantage.weight", "advantage.bias",
        "value.weight", "value.bias",
    }  # fmt: skip
    assert scalar(obs).shape == (5, 3)


def bandit(rows: int, rng) -> SampleBatch:
    """One state, two actions, each episode one step: action 0 pays 1, action 1 pays
    0 or 2 with even odds. Both are worth 1; their distributions differ."""
    actions = rng.integers(2, size=rows)
    rewards = np.where(actions == 0, 1.0, 2.0 * rng.integers(2, size=rows)).astype(np.float32)
    obs = np.zeros((rows, 4), np.float32)
    return SampleBatch(
        {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "next_obs": obs,
            "terminateds": np.ones(rows, bool),
            "truncateds": np.zeros(rows, bool),
        }
    )


def test_c51_learns_the_distribution_of_returns_and_not_only_their_mean():
    config = DQNPolicyConfig(seed=0, num_atoms=5, v_min=-1.0, v_max=3.0, lr=1e-2, hidden=(16,))
    policy = DQNPolicy(*cartpole_spaces(), config)
    rng = np.random.default_rng(0)
    for _ in range(300):
        info = policy.learn_on_batch(bandit(64, rng))
    assert info["td_error"].shape == (64,) and (info["td_error"] >= 0).all()  # cross-entropy
    with torch.no_grad():
        probs = policy.model.logits(torch.zeros(1, 4)).softmax(-1)[0].numpy()
        q = policy.model(torch.zeros(1, 4))[0].numpy()
    # atoms: -1, 0, 1, 2, 3
    assert probs[0, 2] > 0.9  # action 0: all on 1
    assert probs[1, 1] > 0.4 and probs[1, 3] > 0.4 and probs[1, 2] < 0.1  # action 1: 0 or 2
    np.testing.assert_allclose(q, [1.0, 1.0], atol=0.15)


def test_noisy_policy_explores_by_its_noise_not_by_epsilon():
    policy = DQNPolicy(*cartpole_spaces(), DQNPolicyConfig(seed=0, noisy=True, sigma0=4.0))
    obs = np.zeros((1, 4), np.float32) + 0.1
    policy.set_epsilon(0.0)  # no epsilon, yet exploring draws differ
    explored = {int(policy.compute_actions(obs)[0][0]) for _ in range(50)}
    assert explored == {0, 1}
    greedy = {int(policy.compute_actions(obs, explore=False)[0][0]) for _ in range(20)}
    assert len(greedy) == 1
    policy.set_epsilon(1.0)  # epsilon is not used with noisy layers
    assert {int(policy.compute_actions(obs, explore=False)[0][0]) for _ in range(20)} == greedy
    # A noisy distributional policy learns (its loss falls on a fixed batch) and keeps the
    # noise's scales in its state.
    rainbow = DQNPolicy(
        *cartpole_spaces(), DQNPolicyConfig(seed=0, noisy=True, num_atoms=11, v_max=20.0)
    )
    batch = transitions(rainbow, 64)
    before = rainbow.loss(batch)["total"].item()
    for _ in range(30):
        rainbow.learn_on_batch(batch)
    assert rainbow.loss(batch)["total"].item() < before
    state = rainbow.get_state()
    assert any("sigma" in name for name in state["target_weights"])
    again = DQNPolicy(
        *cartpole_spaces(), DQNPolicyConfig(seed=1, noisy=True, num_atoms=11, v_max=20.0)
    )
    again.set_state(state)
    assert (again.compute_actions(batch["obs"], explore=False)[0]
            == rainbow.compute_actions(batch["obs"], explore=False)[0]).all()  # fmt: skip


def test_a_distribution_needs_a_support():
    with pytest.raises(ValueError, match="v_min"):
        DQNPolicy(*cartpole_spaces(), DQNPolicyConfig(num_atoms=11, v_min=1.0, v_max=1.0))
    with pytest.raises(ValueError, match="num_atoms"):
        DQNPolicy(*cartpole_spaces(), DQNPolicyConfig(num_atoms=0))
