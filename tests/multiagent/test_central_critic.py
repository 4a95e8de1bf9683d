"""A centralized critic (MAPPO): the actor sees its agent's observation, the critic the state."""

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.test import parallel_api_test

from hrl_tasks.algorithms import PPO
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.envs.multi_agent import CentralCritic, CentralCriticEnv, make_multi_agent_env
from hrl_tasks.policies.ppo import PPOPolicy, PPOPolicyConfig
from hrl_tasks.policies.spaces import StateBox, UnsupportedSpaceError
from tests.multiagent.envs import race

SPREAD = "mpe2.simple_spread_v3"


def test_the_cooperative_env_passes_pettingzoos_parallel_api_test():
    parallel_api_test(simple_spread_v3.parallel_env(max_cycles=25), num_cycles=100)


def test_each_observation_is_followed_by_the_envs_global_state():
    env = make_multi_agent_env(CentralCritic(SPREAD), {"max_cycles": 25})
    plain = make_multi_agent_env(SPREAD, {"max_cycles": 25})
    obs, _ = env.reset(seed=4)
    reference, _ = plain.reset(seed=4)
    space = env.observation_space("agent_0")
    assert isinstance(space, StateBox) and space.own_size == 18 and space.shape == (18 + 54,)
    for _ in range(5):
        for agent, vector in obs.items():
            np.testing.assert_array_equal(vector[:18], reference[agent])
            np.testing.assert_allclose(vector[18:], plain.env.state(), rtol=1e-6)
        actions = {agent: 1 for agent in obs}
        obs, *_ = env.step(actions)
        reference, *_ = plain.step(actions)


def test_without_a_state_the_global_part_is_every_agents_latest_observation():
    env = CentralCriticEnv(race())
    obs, _ = env.reset()
    assert env.observation_space("runner_0").own_size == 1
    np.testing.assert_array_equal(obs["runner_1"], [3.0, 2.0, 3.0, 4.0])
    obs, *_ = env.step({agent: 0 for agent in obs})
    np.testing.assert_array_equal(obs["runner_0"], [1.0, 1.0, 2.0, 3.0])
    masked = race()
    masked.observation_spaces = {
        a: gym.spaces.Dict({"x": s}) for a, s in masked.observation_spaces.items()
    }
    with pytest.raises(UnsupportedSpaceError, match="needs Box observations"):
        CentralCriticEnv(masked)


def test_the_actor_ignores_the_state_and_the_critic_reads_it():
    space = StateBox(np.full(6, -10.0, np.float32), np.full(6, 10.0, np.float32), own_size=2)
    policy = PPOPolicy(space, gym.spaces.Discrete(3), PPOPolicyConfig(seed=0))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(16, 6)).astype(np.float32)
    other = obs.copy()
    other[:, 2:] = rng.normal(size=(16, 4))  # the same agents' views, another state
    for acting in (policy, policy.inference_copy()):
        _, a = acting.compute_actions(obs, explore=False)
        _, b = acting.compute_actions(other, explore=False)
        np.testing.assert_allclose(a["logp"], b["logp"], atol=1e-6)  # the same policy
        assert not np.allclose(a["values"], b["values"])  # another value
    numpy_copy = policy.inference_copy()
    np.testing.assert_allclose(
        numpy_copy.compute_values(obs), policy.compute_values(obs), atol=1e-5
    )


@pytest.mark.cluster
def test_ppo_with_a_central_critic_trains_and_acts_on_an_agents_own_view(engine):
    config = {"env": SPREAD, "env_config": {"max_cycles": 25}, "central_critic": True,
              "num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 25,
              "train_batch_size": 200, "minibatch_size": 100, "num_sgd_iter": 2, "seed": 0}  # fmt: skip
    algo = PPO(config, engine=engine)
    try:
        result = [algo.train() for _ in range(2)][-1]
        assert result["episode_len_mean"] == 25.0 and "default_policy/total" in result["info"]
        own = simple_spread_v3.parallel_env().reset(seed=0)[0]["agent_0"]
        assert 0 <= algo.compute_single_action(own) < 5
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match="central_critic is for multi-agent envs"):
        PPO({"env": "CartPole-v1", "central_critic": True})
