"""Policies behind one PolicyMap, the agent mapping, and action masks in every policy."""

import gymnasium as gym
import numpy as np
import pytest

from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.data import MultiAgentBatch
from hrl_tasks.envs.multi_agent import make_multi_agent_env
from hrl_tasks.policies.dqn import DQNPolicy, DQNPolicyConfig
from hrl_tasks.policies.policy_map import (
    PolicyMap,
    PolicySpec,
    as_policy_spec,
    policy_observation,
    policy_observation_space,
)
from hrl_tasks.policies.ppo import PPOPolicy, PPOPolicyConfig
from hrl_tasks.policies.spaces import MaskedBox, UnsupportedSpaceError
from hrl_tasks.rollout.multi_agent_worker import Episode, MultiAgentRolloutWorker

GAME_SPACE = gym.spaces.Dict(
    {
        "observation": gym.spaces.Box(0, 1, (3, 3, 2), np.int8),
        "action_mask": gym.spaces.Box(0, 1, (9,), np.int8),
    }
)
ACTIONS = gym.spaces.Discrete(9)


def two_policies(mapping=None, trained=None):
    space = policy_observation_space(GAME_SPACE)
    policies = {
        "ppo": PPOPolicy(space, ACTIONS, PPOPolicyConfig(seed=0)),
        "dqn": DQNPolicy(space, ACTIONS, DQNPolicyConfig(seed=0, epsilon=1.0)),
    }
    return PolicyMap(policies, mapping or first_ppo_second_dqn, trained)


def first_ppo_second_dqn(agent_id, episode):
    return "ppo" if agent_id == "player_1" else "dqn"


def observations_with_masks(rng, n=64):
    """Random boards' planes, each with a random non-empty set of legal moves."""
    masks = rng.random((n, 9)) < 0.4
    masks[np.arange(n), rng.integers(9, size=n)] = True
    planes = rng.integers(0, 2, (n, 18)).astype(np.float32)
    return np.concatenate([planes, masks.astype(np.float32)], axis=1), masks


def test_a_game_observation_becomes_a_flat_vector_with_its_mask_last():
    space = policy_observation_space(GAME_SPACE)
    assert isinstance(space, MaskedBox) and space.shape == (27,) and space.mask_size == 9
    sample = GAME_SPACE.sample()
    vector = policy_observation(sample)
    assert vector.dtype == np.float32 and space.contains(vector)
    np.testing.assert_array_equal(vector[-9:], sample["action_mask"])
    np.testing.assert_array_equal(vector[:18], sample["observation"].ravel())
    box = gym.spaces.Box(-1, 1, (4,))
    assert policy_observation_space(box) is box
    with pytest.raises(UnsupportedSpaceError, match="'observation' .* 'action_mask'"):
        policy_observation_space(gym.spaces.Dict({"position": box}))


@pytest.mark.parametrize("explore", [True, False])
def test_every_policy_chooses_only_legal_actions(explore):
    rng = np.random.default_rng(0)
    policy_map = two_policies()
    obs, masks = observations_with_masks(rng)
    acting = [policy_map["ppo"], policy_map["ppo"].inference_copy(), policy_map["dqn"]]
    for policy in acting:
        for _ in range(20):
            actions, _ = policy.compute_actions(obs, explore=explore)
            assert masks[np.arange(len(obs)), actions].all(), type(policy).__name__


def test_the_numpy_copy_gives_a_masked_action_the_torch_policys_log_probability():
    rng = np.random.default_rng(1)
    policy = two_policies()["ppo"]
    obs, masks = observations_with_masks(rng)
    actions, extras = policy.inference_copy().compute_actions(obs, explore=True)
    torch_logp = policy.forward_batch({"obs": obs, "actions": actions})[2].detach().numpy()
    np.testing.assert_allclose(extras["logp"], torch_logp, atol=1e-5)
    only_one = masks.sum(axis=1) == 1  # a single legal move is certain
    np.testing.assert_allclose(extras["logp"][only_one], 0.0, atol=1e-5)


def test_the_mapping_names_a_policy_per_agent_and_unknown_names_are_refused():
    policy_map = two_policies()
    episode = Episode(id=7, worker_index=1)
    assert policy_map.policy_id("player_1", episode) == "ppo"
    assert policy_map.policy_id("player_2", episode) == "dqn"
    wrong = two_policies(mapping=lambda agent, episode: "sac")
    with pytest.raises(ValueError, match="returned 'sac', which is not among the policies"):
        wrong.policy_id("player_1", episode)
    unmapped = PolicyMap(dict(two_policies().policies))
    with pytest.raises(ValueError, match="need a policy_mapping_fn"):
        unmapped.policy_id("player_1", episode)
    with pytest.raises(ValueError, match=r"policies_to_train names \['sac'\]"):
        two_policies(trained=["sac"])


def test_learning_goes_to_each_trained_policy_on_its_own_rows_only():
    worker = MultiAgentRolloutWorker("tictactoe_v3", two_policies(trained=["dqn"]), num_envs=2,
                                     rollout_fragment_length=20, seed=0)  # fmt: skip
    batch, _ = worker.sample()
    before = worker.get_weights()
    info = worker.learn_on_batch(batch)
    after = worker.get_weights()
    assert info and all(key.startswith("dqn/") for key in info)
    for name, value in before["ppo"].items():  # not trained: unchanged
        np.testing.assert_array_equal(value, after["ppo"][name])
    assert any(not np.array_equal(v, after["dqn"][k]) for k, v in before["dqn"].items())


def test_weights_and_state_round_trip_by_policy_id():
    a, b = two_policies(), two_policies()
    for policy in b.policies.values():  # make b differ
        policy.set_weights({k: v + 1.0 for k, v in policy.get_weights().items()})
    b.set_weights(a.get_weights())
    for pid in a:
        for name, value in a[pid].get_weights().items():
            np.testing.assert_array_equal(value, b[pid].get_weights()[name])
    state = a.get_state()
    assert set(state) == {"ppo", "dqn"}
    with pytest.raises(KeyError, match=r"no policy \['dqn'\]"):
        b.set_state({"ppo": state["ppo"]})


def test_a_single_policy_learns_from_a_plain_batch_and_several_refuse_one():
    policy_map = two_policies()
    worker = MultiAgentRolloutWorker("tictactoe_v3", policy_map, rollout_fragment_length=10, seed=1)
    batch, _ = worker.sample()
    with pytest.raises(TypeError, match="several policies"):
        policy_map.learn_on_batch(batch["ppo"])
    alone = PolicyMap({"ppo": policy_map["ppo"]})
    assert set(alone.learn_on_batch(batch["ppo"])) >= {"ppo/total"}
    assert isinstance(MultiAgentBatch.concat_samples([batch, batch]), MultiAgentBatch)


def test_policy_specs_come_from_specs_dicts_or_none_and_bad_ones_are_named():
    assert as_policy_spec(None) == PolicySpec()
    assert as_policy_spec({"algorithm": "dqn", "config": {"lr": 1e-3}}).algorithm == "dqn"
    with pytest.raises(ConfigError, match=r"policies\['a'\] has no field \['lr'\]"):
        as_policy_spec({"lr": 1e-3}, "policies", "a")
    with pytest.raises(ConfigError, match=r"policies\['a'\] must be a PolicySpec"):
        as_policy_spec("ppo", "policies", "a")


def test_the_env_an_algorithm_builds_gives_the_policies_their_spaces():
    env = make_multi_agent_env("connect_four_v3")
    space = policy_observation_space(env.observation_space("player_0"))
    assert space.mask_size == 7 and space.shape == (6 * 7 * 2 + 7,)
