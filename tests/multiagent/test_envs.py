"""The multi-agent env adapters against the PettingZoo envs they wrap, step by step."""

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from pettingzoo.test import api_test, parallel_api_test

from hrl_tasks.envs.multi_agent import (
    ALL,
    ParallelEnvAdapter,
    TurnBasedEnvAdapter,
    as_multi_agent_env,
    is_multi_agent,
    make_multi_agent_env,
)
from hrl_tasks.rollout import MultiAgentEnvError
from tests.multiagent.envs import race

GAMES = [tictactoe_v3, connect_four_v3]


@pytest.mark.parametrize("module", GAMES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_the_turn_based_games_pass_pettingzoos_api_test(module):
    api_test(module.env(), num_cycles=200)


def test_the_parallel_game_passes_pettingzoos_parallel_api_test():
    parallel_api_test(rps_v2.parallel_env(), num_cycles=200)


@pytest.mark.parametrize("module", GAMES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_the_turn_based_adapter_matches_the_aec_env_step_by_step(module):
    """The same random legal moves in the wrapped env (read with ``last()``) and the
    adapter: the same mover, observation, reward and end, over whole games."""
    reference, adapter = module.env(), TurnBasedEnvAdapter(module.env())
    rng = np.random.default_rng(0)
    for game in range(200):
        reference.reset(seed=game)
        obs, _ = adapter.reset(seed=game)
        returns = {agent: 0.0 for agent in reference.possible_agents}
        while True:
            agent = reference.agent_selection
            observation, reward, terminated, truncated, _ = reference.last()
            assert list(obs) == [agent]
            np.testing.assert_array_equal(obs[agent]["observation"], observation["observation"])
            np.testing.assert_array_equal(obs[agent]["action_mask"], observation["action_mask"])
            if terminated or truncated:
                break
            action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
            reference.step(action)
            obs, rewards, terminateds, truncateds, _ = adapter.step({agent: action})
            for who, r in rewards.items():
                returns[who] += r
            if terminateds[ALL] or truncateds[ALL]:
                assert set(obs) == set(reference.possible_agents)  # every player's last view
                assert all(terminateds[a] for a in obs)
                for who in obs:  # each player's last view is the wrapped env's
                    np.testing.assert_array_equal(
                        obs[who]["observation"], reference.observe(who)["observation"]
                    )
                break
            assert not terminateds.get(agent)
        assert sum(returns.values()) == 0.0  # zero-sum: +1/-1 or a draw


def test_turn_based_returns_match_the_winner_of_each_game():
    """Over many random games, the adapter's returns per player are PettingZoo's."""
    rng = np.random.default_rng(1)
    for game in range(300):
        reference, adapter = tictactoe_v3.env(), TurnBasedEnvAdapter(tictactoe_v3.env())
        reference.reset(seed=game)
        obs, _ = adapter.reset(seed=game)
        expected = {a: 0.0 for a in reference.possible_agents}
        got = dict(expected)
        for agent in reference.agent_iter():
            observation, reward, terminated, truncated, _ = reference.last()
            expected[agent] += reward
            if terminated or truncated:
                reference.step(None)
                continue
            action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
            reference.step(action)
            obs, rewards, terminateds, _, _ = adapter.step({agent: action})
            for who, r in rewards.items():
                got[who] += r
        assert got == expected


def test_the_parallel_adapter_matches_the_parallel_env_step_by_step():
    reference, adapter = rps_v2.parallel_env(), ParallelEnvAdapter(rps_v2.parallel_env())
    rng = np.random.default_rng(2)
    for game in range(20):
        ref_obs, _ = reference.reset(seed=game)
        obs, _ = adapter.reset(seed=game)
        while True:
            assert set(obs) == set(ref_obs)
            for agent in obs:
                np.testing.assert_array_equal(obs[agent], ref_obs[agent])
            actions = {agent: int(rng.integers(3)) for agent in obs}
            ref_obs, ref_rewards, ref_term, ref_trunc, _ = reference.step(actions)
            obs, rewards, terminateds, truncateds, _ = adapter.step(actions)
            assert rewards == ref_rewards
            assert {k: v for k, v in terminateds.items() if k != ALL} == ref_term
            assert {k: v for k, v in truncateds.items() if k != ALL} == ref_trunc
            if not reference.agents:
                assert terminateds[ALL] or truncateds[ALL]
                break
            assert not (terminateds[ALL] or truncateds[ALL])


def test_agents_that_finish_at_different_times_leave_one_by_one():
    env = race()
    obs, _ = env.reset()
    seen_done = []
    while True:
        obs, rewards, terminateds, _, _ = env.step({agent: 0 for agent in obs})
        seen_done += [a for a in obs if terminateds.get(a)]
        obs = {a: o for a, o in obs.items() if not terminateds.get(a)}
        if terminateds[ALL]:
            break
    assert seen_done == ["runner_0", "runner_1", "runner_2"]


def test_specs_and_creators_build_multi_agent_envs_and_refuse_single_agent_ones():
    assert isinstance(make_multi_agent_env("tictactoe_v3"), TurnBasedEnvAdapter)
    assert isinstance(make_multi_agent_env("pettingzoo.classic.rps_v2"), ParallelEnvAdapter)
    assert isinstance(make_multi_agent_env(race), type(race()))
    assert isinstance(as_multi_agent_env(rps_v2.env()), TurnBasedEnvAdapter)
    assert is_multi_agent("connect_four_v3") and is_multi_agent(race)
    assert not is_multi_agent("CartPole-v1")
    with pytest.raises(MultiAgentEnvError, match="'CartPole-v1' is not a multi-agent env"):
        make_multi_agent_env("CartPole-v1")
