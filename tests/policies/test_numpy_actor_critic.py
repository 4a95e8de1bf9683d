"""The numpy inference copy acts, values and postprocesses as its torch policy does."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import decode, encode
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies import (
    IMPALAPolicy,
    IMPALAPolicyConfig,
    NumpyActorCritic,
    PGPolicy,
    PGPolicyConfig,
    PPOPolicy,
    PPOPolicyConfig,
)
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

POLICIES = {
    "ppo-discrete": lambda: PPOPolicy(*cartpole_spaces(), PPOPolicyConfig(seed=0)),
    "ppo-continuous": lambda: PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(seed=0)),
    "ppo-shared-trunk": lambda: PPOPolicy(
        *cartpole_spaces(), PPOPolicyConfig(seed=0, shared_trunk=True, hidden=(32, 16))
    ),
    "ppo-relu-rl-zoo": lambda: PPOPolicy(
        *pendulum_spaces(),
        PPOPolicyConfig(
            seed=0, activation="relu", log_std_init=-2.0, hidden=(32, 32), shared_trunk=True
        ),
    ),  # fmt: skip
    "pg-no-critic": lambda: PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0, use_critic=False)),
    "impala-continuous": lambda: IMPALAPolicy(*pendulum_spaces(), IMPALAPolicyConfig(seed=0)),
}


@pytest.fixture(params=sorted(POLICIES))
def policy(request):
    return POLICIES[request.param]()


def observations(policy, n=64, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *policy.observation_space.shape)).astype(np.float32)


def torch_logp(policy, obs, actions):
    with torch.no_grad():
        dist, _ = policy.model(policy.obs_tensor(obs))
        return dist.logp(torch.from_numpy(np.asarray(actions))).numpy()


def assert_acts_like(copy, policy, obs):
    greedy, extras = copy.compute_actions(obs, explore=False)
    torch_greedy, torch_extras = policy.compute_actions(obs, explore=False)
    np.testing.assert_allclose(greedy, torch_greedy, atol=1e-5)
    for name in ("logp", "values"):
        assert extras[name].dtype == np.float32 and extras[name].shape == (len(obs),)
        np.testing.assert_allclose(extras[name], torch_extras[name], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(
        copy.compute_values(obs), policy.compute_values(obs), atol=1e-5, rtol=1e-5
    )
    sampled, extras = copy.compute_actions(obs)
    assert sampled.dtype == policy.action_space.dtype and sampled.shape == torch_greedy.shape
    np.testing.assert_allclose(extras["logp"], torch_logp(policy, obs, sampled), atol=1e-4)


def test_the_copy_acts_like_the_policy(policy):
    copy = policy.inference_copy()
    assert isinstance(copy, NumpyActorCritic)
    assert_acts_like(copy, policy, observations(policy))


def test_new_weights_after_learning(policy):
    copy = policy.inference_copy()
    batch = policy.postprocess_trajectory(fragment(policy))
    for _ in range(3):
        policy.learn_on_batch(batch)
    stale = copy.get_weights()
    assert any(not np.allclose(stale[k], v) for k, v in policy.get_weights().items())
    copy.set_weights(policy.get_weights())
    assert_acts_like(copy, policy, observations(policy))
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(copy.get_weights()[name], value)


def test_postprocesses_like_the_policy(policy):
    copy = policy.inference_copy()
    piece = fragment(policy)
    ours, theirs = copy.postprocess_trajectory(piece), policy.postprocess_trajectory(piece)
    assert ours.columns == theirs.columns
    for name in theirs.columns:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def test_categorical_samples_follow_the_probabilities():
    policy = PPOPolicy(*cartpole_spaces(), PPOPolicyConfig(seed=0, hidden=(8,)))
    weights = policy.get_weights()
    weights["actor.2.bias"] = np.array([0.0, 1.0], np.float32)  # p(1) = e / (1 + e) = 0.731
    policy.set_weights(weights)
    copy = policy.inference_copy()
    obs = np.zeros((20_000, 4), np.float32)
    actions, extras = copy.compute_actions(obs)
    assert abs(actions.mean() - np.e / (1 + np.e)) < 0.015
    np.testing.assert_allclose(np.exp(extras["logp"][actions == 1]), np.e / (1 + np.e), rtol=1e-5)


def test_gaussian_samples_have_the_policy_mean_and_std():
    policy = PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(seed=0))
    weights = policy.get_weights()
    weights["dist_head.log_std"] = np.array([-0.5], np.float32)
    policy.set_weights(weights)
    copy = policy.inference_copy()
    obs = np.tile(observations(policy, n=1), (20_000, 1))
    actions, _ = copy.compute_actions(obs)
    mean, _ = copy.compute_actions(obs[:1], explore=False)
    assert abs(actions.mean() - mean[0, 0]) < 0.02
    assert abs(actions.std() - np.exp(-0.5)) < 0.02


def test_seeds_make_sampling_reproducible():
    policy = POLICIES["ppo-continuous"]()
    one, two = policy.inference_copy(), policy.inference_copy()
    obs = observations(policy)
    one.seed(7)
    two.seed(7)
    np.testing.assert_array_equal(one.compute_actions(obs)[0], two.compute_actions(obs)[0])
    two.seed(8)
    assert not np.array_equal(one.compute_actions(obs)[0], two.compute_actions(obs)[0])


def test_state_round_trip_through_the_codec_continues_the_draws():
    policy = POLICIES["ppo-discrete"]()
    copy = policy.inference_copy()
    copy.seed(3)
    copy.compute_actions(observations(policy))
    restored = policy.inference_copy()
    restored.set_state(decode(encode(copy.get_state())))
    obs = observations(policy, n=256, seed=2)
    np.testing.assert_array_equal(copy.compute_actions(obs)[0], restored.compute_actions(obs)[0])


def test_learning_is_refused_with_a_pointer_to_the_torch_policy(policy):
    copy = policy.inference_copy()
    with pytest.raises(NotImplementedError, match="only acts"):
        copy.learn_on_batch(policy.postprocess_trajectory(fragment(policy)))


def test_weights_that_do_not_fit_the_spaces_are_refused():
    policy = POLICIES["ppo-discrete"]()
    weights = policy.get_weights()
    with pytest.raises(ValueError, match="the spaces need 3 and 2"):
        NumpyActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), weights)
    with pytest.raises(ValueError, match="'actor.\\*' and 'critic.\\*'"):
        critic = {k: v for k, v in weights.items() if k.startswith("critic.")}
        NumpyActorCritic(*cartpole_spaces(), critic)
    with pytest.raises(ValueError, match="no actor.4.bias"):
        NumpyActorCritic(
            *cartpole_spaces(), {k: v for k, v in weights.items() if k != "actor.4.bias"}
        )
    gaussian = POLICIES["ppo-continuous"]().get_weights()
    del gaussian["dist_head.log_std"]
    with pytest.raises(ValueError, match="dist_head.log_std"):
        NumpyActorCritic(*pendulum_spaces(), gaussian)


def test_image_observations_keep_a_torch_copy():
    space = gym.spaces.Box(0, 255, (36, 36, 1), np.uint8)
    policy = PPOPolicy(space, gym.spaces.Discrete(3), PPOPolicyConfig(seed=0, hidden=()))
    copy = policy.inference_copy()
    assert isinstance(copy, PPOPolicy) and copy is not policy
    obs = np.random.default_rng(0).integers(0, 255, (4, 36, 36, 1), dtype=np.uint8)
    np.testing.assert_array_equal(
        copy.compute_actions(obs, explore=False)[0], policy.compute_actions(obs, explore=False)[0]
    )


def test_rl_zoo_settings_reach_the_copy_and_a_wrong_activation_is_named():
    policy = POLICIES["ppo-relu-rl-zoo"]()
    np.testing.assert_array_equal(policy.model.dist_head.log_std.detach().numpy(), [-2.0])
    copy = policy.inference_copy()
    assert copy.activation == "relu" and copy.reward_normalization_gamma is None
    rewarded = PPOPolicy(
        *pendulum_spaces(), PPOPolicyConfig(seed=0, normalize_rewards=True, gamma=0.9)
    )
    assert rewarded.inference_copy().reward_normalization_gamma == 0.9
    with pytest.raises(
        ConfigError, match="PPOPolicyConfig.activation must be one of 'tanh', 'relu', got 'gelu'"
    ):
        PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(activation="gelu"))
