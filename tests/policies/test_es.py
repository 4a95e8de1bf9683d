import numpy as np
import pytest

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import ESPolicy, ESPolicyConfig, centered_ranks
from tests.policies.synthetic import cartpole_spaces, es_batch, imitation_loss, pendulum_spaces


def make(seed=0, **overrides):
    return ESPolicy(*pendulum_spaces(), ESPolicyConfig(seed=seed, hidden=(8,), **overrides))


@pytest.fixture
def task():
    """Observations and the actions of a 'teacher' at a known point theta*."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    teacher = make(seed=1)
    theta_star = rng.normal(scale=0.5, size=teacher.num_params).astype(np.float32)
    teacher.set_flat(theta_star)
    return obs, teacher.compute_actions(obs)[0], theta_star


def test_flat_parameters_round_trip():
    policy = make()
    flat = policy.get_flat()
    assert flat.shape == (policy.num_params,) == (3 * 8 + 8 + 8 + 1,) and flat.dtype == np.float32
    policy.set_flat(flat + 1.0)
    np.testing.assert_array_equal(policy.get_flat(), flat + 1.0)
    np.testing.assert_array_equal(policy.get_weights()["1.2.bias"], flat[-1:] + 1.0)
    with pytest.raises(ValueError, match=str(policy.num_params)):
        policy.set_flat(flat[:-1])


def test_set_flat_toward_a_better_point_reduces_the_loss(task):
    obs, targets, theta_star = task
    policy = make()
    theta = policy.get_flat()
    losses = []
    for step in (0.0, 0.5, 0.9, 1.0):
        policy.set_flat(theta + step * (theta_star - theta))
        losses.append(imitation_loss(policy, obs, targets))
    assert losses == sorted(losses, reverse=True)
    assert losses[-1] < 1e-10 < losses[0]


def test_actions_are_deterministic():
    policy = make()
    obs = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    actions, extras = policy.compute_actions(obs)
    np.testing.assert_array_equal(actions, policy.compute_actions(obs, explore=False)[0])
    assert actions.shape == (5, 1) and actions.dtype == np.float32 and extras == {}
    discrete = ESPolicy(*cartpole_spaces(), ESPolicyConfig(seed=0))
    actions, _ = discrete.compute_actions(np.zeros((3, 4), np.float32))
    assert actions.shape == (3,) and actions.dtype == np.int64


def test_gradient_is_the_es_estimate():
    policy = make(l2_coeff=0.01)
    seeds = np.array([3, 11, 5])
    returns = np.array([[1.0, 0.0], [5.0, 2.0], [-1.0, 4.0]])
    # Ranks of the six returns: 1.0->2, 0.0->1, 5.0->5, 2.0->3, -1.0->0, 4.0->4; / 5 - 0.5.
    ranks = np.array([[2, 1], [5, 3], [0, 4]]) / 5 - 0.5
    np.testing.assert_allclose(centered_ranks(returns), ranks, rtol=1e-6)
    direction = sum((ranks[i, 0] - ranks[i, 1]) * policy.noise(s) for i, s in enumerate(seeds)) / 6
    theta = policy.get_flat()
    grads, info = policy.compute_gradients(SampleBatch({"noise_seeds": seeds, "returns": returns}))
    np.testing.assert_allclose(
        np.concatenate([g.ravel() for g in grads]), -direction + 0.01 * theta, rtol=1e-4, atol=1e-6
    )
    assert info["return_max"] == 5.0
    np.testing.assert_array_equal(policy.noise(3), policy.noise(3))
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        policy.loss(SampleBatch({"noise_seeds": seeds, "returns": returns[:, 0]}))


def test_learn_on_batch_improves_the_fitness(task):
    obs, targets, _ = task
    policy = make(lr=0.05, noise_stdev=0.05, l2_coeff=0.0)
    start = imitation_loss(policy, obs, targets)
    for iteration in range(30):
        policy.learn_on_batch(es_batch(policy, obs, targets, n_pairs=8, seed=iteration))
    assert imitation_loss(policy, obs, targets) < 0.5 * start
