"""The one env-spec rule: gymnasium ids, module:Id, PettingZoo names and module paths, creators."""

import pickle

import gymnasium as gym
import pytest

from hrl_tasks.algorithms import get_algorithm
from hrl_tasks.rollout import (
    MultiAgentEnvError,
    PettingZooSpec,
    UnknownEnvError,
    env_name,
    make_env,
    resolve_env,
)

pytest.importorskip("pettingzoo.classic")


def test_gymnasium_ids_stay_ids():
    assert resolve_env("CartPole-v1") == "CartPole-v1"
    assert resolve_env("gymnasium.envs.classic_control:CartPole-v1") == (
        "gymnasium.envs.classic_control:CartPole-v1"
    )


@pytest.mark.parametrize(
    "spec",
    [
        "tictactoe_v3",
        "pettingzoo.classic.tictactoe_v3",
        PettingZooSpec("pettingzoo.classic.tictactoe_v3"),
    ],
)
def test_pettingzoo_names_and_module_paths_resolve_to_the_module(spec):
    resolved = resolve_env(spec)
    assert resolved == PettingZooSpec("pettingzoo.classic.tictactoe_v3")
    assert env_name(resolved) == "tictactoe_v3"
    env = pickle.loads(pickle.dumps(resolved)).make()
    env.reset(seed=0)
    assert env.agents == ["player_1", "player_2"]
    with pytest.raises(ValueError, match="turn-based"):
        resolved.make_parallel()


def test_connect_four_is_found_among_the_classic_games():
    assert resolve_env("connect_four_v3").module == "pettingzoo.classic.connect_four_v3"


def test_a_creator_function_is_kept():
    def creator():
        return gym.make("CartPole-v1")

    assert resolve_env(creator) is creator


def test_an_unknown_name_suggests_gymnasium_and_pettingzoo_neighbours():
    with pytest.raises(UnknownEnvError, match="did you mean 'tictactoe_v3'"):
        resolve_env("tictactoe_v2")
    with pytest.raises(UnknownEnvError, match="did you mean 'CartPole-v1'"):
        resolve_env("CartPole-v9")


def test_a_module_without_env_functions_is_not_an_env():
    with pytest.raises(UnknownEnvError, match="unknown env 'json.decoder'"):
        resolve_env("json.decoder")


def test_single_agent_algorithms_refuse_a_game_before_any_cluster_starts():
    with pytest.raises(MultiAgentEnvError, match="a2c trains single-agent .* 'tictactoe_v3'.* ppo"):
        get_algorithm("a2c")({"env": "tictactoe_v3"})
    with pytest.raises(MultiAgentEnvError, match="'connect_four_v3' is a PettingZoo"):
        make_env("connect_four_v3")
