"""`NumpyQNetwork`: the DQN policy's numpy acting copy against the torch policy."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch, decode, encode
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig, NumpyQNetwork
from tests.policies.synthetic import cartpole_spaces

CONFIGS = {
    "dueling": DQNPolicyConfig(seed=0, hidden=(64, 64)),
    "plain-head": DQNPolicyConfig(seed=0, hidden=(32,), dueling=False),
    "no-trunk": DQNPolicyConfig(seed=0, hidden=(), n_step=3),
}


@pytest.fixture(params=sorted(CONFIGS))
def policy(request):
    return DQNPolicy(*cartpole_spaces(), CONFIGS[request.param])


def observations(n=256, seed=1):
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


def test_greedy_actions_and_q_values_are_the_torch_policy_s(policy):
    copy = policy.inference_copy()
    assert isinstance(copy, NumpyQNetwork)
    obs = observations()
    with torch.no_grad():
        torch_q = policy.model(policy.obs_tensor(obs)).numpy()
    np.testing.assert_allclose(copy.q_values(obs), torch_q, atol=1e-5)
    greedy, extras = copy.compute_actions(obs, explore=False)
    torch_greedy, _ = policy.compute_actions(obs, explore=False)
    assert extras == {} and greedy.dtype == np.int64
    np.testing.assert_array_equal(greedy, torch_greedy)


def test_epsilon_replaces_that_share_of_actions_with_uniform_ones(policy):
    copy = policy.inference_copy()
    obs = np.repeat(observations(1), 20_000, axis=0)  # one state: one greedy action
    greedy = int(copy.compute_actions(obs[:1], explore=False)[0][0])
    copy.set_epsilon(0.3)
    copy.seed(0)
    actions, _ = copy.compute_actions(obs)
    # A random action is the greedy one half the time (two actions): 0.3 / 2 differ.
    assert abs(np.mean(actions != greedy) - 0.15) < 0.01
    assert np.isin(actions, [0, 1]).all()
    with pytest.raises(ValueError, match="epsilon must be in"):
        copy.set_epsilon(1.5)


def test_the_copy_takes_the_policy_s_epsilon_and_new_weights(policy):
    policy.set_epsilon(0.25)
    copy = policy.inference_copy()
    assert copy.epsilon == 0.25
    with torch.no_grad():
        for param in policy.model.parameters():
            param.add_(0.1)
    copy.set_weights(policy.get_weights())
    obs = observations()
    with torch.no_grad():
        np.testing.assert_allclose(
            copy.q_values(obs), policy.model(policy.obs_tensor(obs)).numpy(), atol=1e-5
        )


def test_n_step_postprocessing_is_the_policy_s(policy):
    rng = np.random.default_rng(0)
    n = 12
    fragment = SampleBatch({
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": rng.integers(2, size=n),
        "rewards": rng.normal(size=n).astype(np.float32),
        "terminateds": np.eye(n, dtype=bool)[7],
        "truncateds": np.zeros(n, dtype=bool),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
    })  # fmt: skip
    mine = policy.inference_copy().postprocess_trajectory(fragment)
    theirs = policy.postprocess_trajectory(fragment)
    assert set(mine.columns) == set(theirs.columns)
    for name in theirs.columns:
        np.testing.assert_array_equal(mine[name], theirs[name])


def test_masked_actions_are_never_taken():
    space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    space.mask_size = 2  # the last two entries say which of the two actions are legal
    policy = DQNPolicy(space, gym.spaces.Discrete(2), DQNPolicyConfig(seed=0, hidden=(16,)))
    copy = policy.inference_copy()
    obs = np.random.default_rng(0).normal(size=(500, 6)).astype(np.float32)
    obs[:, -2:] = [0.0, 1.0]  # only action 1 is legal
    copy.set_epsilon(1.0)
    assert (copy.compute_actions(obs)[0] == 1).all()
    assert (copy.compute_actions(obs, explore=False)[0] == 1).all()


def test_state_round_trip_through_the_codec_continues_the_draws(policy):
    copy = policy.inference_copy()
    copy.set_epsilon(0.5)
    copy.seed(3)
    state = decode(encode(copy.get_state()))
    obs = observations()
    first, _ = copy.compute_actions(obs)
    again = policy.inference_copy()
    again.set_state(state)
    assert again.epsilon == 0.5
    np.testing.assert_array_equal(again.compute_actions(obs)[0], first)


def test_learning_is_refused_and_weights_that_do_not_fit_are_named(policy):
    copy = policy.inference_copy()
    with pytest.raises(NotImplementedError, match="learn with the DQNPolicy"):
        copy.loss(SampleBatch({"obs": observations(2)}))
    weights = policy.get_weights()
    with pytest.raises(ValueError, match="weights need 'advantage.weight'"):
        NumpyQNetwork(*cartpole_spaces(), {k: v for k, v in weights.items() if "adv" not in k})
    wide = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    with pytest.raises(ValueError, match="the spaces need 5 and 2"):
        NumpyQNetwork(wide, gym.spaces.Discrete(2), weights)


def test_image_observations_keep_a_torch_copy():
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = DQNPolicy(space, gym.spaces.Discrete(3), DQNPolicyConfig(seed=0))
    assert isinstance(policy.inference_copy(), DQNPolicy)
