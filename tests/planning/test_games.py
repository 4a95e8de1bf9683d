"""TicTacToe and ConnectFour against PettingZoo's own envs, move for move."""

import collections
import warnings

import numpy as np
import pytest

from hrl_tasks.planning.game import Game
from hrl_tasks.planning.games import ConnectFour, TicTacToe, make_game

with warnings.catch_warnings():  # PettingZoo 1.27 prefers pettingzoo.make("aec", "classic/...")
    warnings.filterwarnings("ignore", "The old environment creation API", DeprecationWarning)
    from pettingzoo.classic import connect_four_v3, tictactoe_v3

PETTINGZOO_ENVS = {"tictactoe_v3": tictactoe_v3, "connect_four_v3": connect_four_v3}
CONNECT_FOUR_DRAW = (
    "555054466351352123041430222100021613443666"  # columns, from a seeded random game
)


def assert_same_position(game, state, env):
    """Everything PettingZoo shows the agent to move agrees with ``game`` at ``state``."""
    agent = env.agent_selection
    terminal = game.is_terminal(state)
    assert game.pettingzoo_agents[game.to_play(state)] == agent
    assert all(env.terminations[a] == terminal for a in env.agents)
    seen = env.observe(agent)
    observation = game.observation(state)
    assert observation.dtype == seen["observation"].dtype == np.int8
    np.testing.assert_array_equal(observation, seen["observation"])
    if terminal:  # PettingZoo's mask still lists the empty cells after a win; ours is empty
        assert not game.legal_mask(state).any()
    else:
        np.testing.assert_array_equal(game.legal_mask(state), seen["action_mask"] == 1)
    assert game.state_from_observation(seen) == state
    assert game.state_from_observation(seen["observation"]) == state


def play_along(game, env, actions):
    """Play ``actions`` (or, while None is given, random legal ones) in both; the final state."""
    env.reset()
    state = game.initial_state()
    for action in actions:
        assert_same_position(game, state, env)
        if game.is_terminal(state):
            break
        env.step(action)
        state = game.step(state, action)
    else:
        assert_same_position(game, state, env)
    assert game.is_terminal(state)
    rewards = [env._cumulative_rewards[agent] for agent in game.pettingzoo_agents]
    np.testing.assert_array_equal(game.returns(state), rewards)
    return state


def random_actions(game, rng):
    """Uniform random legal actions of a game played alongside (see `play_along`)."""
    state = game.initial_state()
    while not game.is_terminal(state):
        legal = np.flatnonzero(game.legal_mask(state))
        action = int(legal[rng.integers(len(legal))])
        state = game.step(state, action)
        yield action
    yield None  # lets play_along check the final position


@pytest.mark.parametrize(("name", "games"), [("tictactoe_v3", 600), ("connect_four_v3", 300)])
def test_random_games_match_pettingzoo(name, games):
    game = make_game(name)
    env = PETTINGZOO_ENVS[name].env()
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    for _ in range(games):
        state = play_along(game, env, random_actions(game, rng))
        outcomes[tuple(game.returns(state))] += 1
    assert outcomes[(1.0, -1.0)] > 0 and outcomes[(-1.0, 1.0)] > 0
    if name == "tictactoe_v3":
        assert outcomes[(0.0, 0.0)] > 0


def test_connect_four_draw_matches_pettingzoo():
    game = ConnectFour()
    actions = [int(c) for c in CONNECT_FOUR_DRAW] + [None]
    state = play_along(game, connect_four_v3.env(), actions)
    assert state.moves == 42
    np.testing.assert_array_equal(game.returns(state), [0.0, 0.0])


@pytest.mark.parametrize("game", [TicTacToe(), ConnectFour()])
def test_games_follow_the_protocol(game):
    assert isinstance(game, Game)
    assert game.num_players == 2
    assert game.observation(game.initial_state()).shape == game.observation_shape
    assert game.legal_mask(game.initial_state()).shape == (game.num_actions,)
    np.testing.assert_array_equal(game.returns(game.initial_state()), [0.0, 0.0])


def test_transpositions_are_equal_hashable_states():
    game = ConnectFour()
    one, other = game.initial_state(), game.initial_state()
    for action in (3, 2, 4):
        one = game.step(one, action)
    for action in (4, 2, 3):
        other = game.step(other, action)
    assert one == other and hash(one) == hash(other)
    assert len({one, other, game.initial_state()}) == 2


def test_tictactoe_square_numbering():
    game = TicTacToe()
    state = game.step(game.initial_state(), 1)  # PettingZoo draws square 1 at row 1, column 0
    np.testing.assert_array_equal(np.argwhere(game.observation(state)[..., 1]), [[0, 1]])


def test_connect_four_pieces_fall_to_the_bottom():
    game = ConnectFour()
    state = game.step(game.step(game.initial_state(), 6), 6)
    planes = game.observation(state)  # player 0 to move: its piece below player 1's
    assert planes[5, 6, 0] == 1 and planes[4, 6, 1] == 1
    assert planes.sum() == 2


@pytest.mark.parametrize(
    ("game", "actions", "illegal", "message"),
    [
        (TicTacToe(), [4], 4, r"action 4 is illegal; legal actions are \[0, 1, 2, 3, 5, 6, 7, 8\]"),
        (TicTacToe(), [], 9, r"action 9 is illegal"),
        (TicTacToe(), [0, 3, 1, 4, 2], 5, r"action 5 is illegal, the game is over"),
        (ConnectFour(), [0] * 6, 0, r"action 0 is illegal; legal actions are \[1, 2, 3, 4, 5, 6\]"),
        (ConnectFour(), [], -1, r"action -1 is illegal"),
        (ConnectFour(), [0, 1, 0, 1, 0, 1, 0], 2, r"action 2 is illegal, the game is over"),
    ],
)
def test_illegal_actions_raise(game, actions, illegal, message):
    state = game.initial_state()
    for action in actions:
        state = game.step(state, action)
    with pytest.raises(ValueError, match=message):
        game.step(state, illegal)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("tictactoe_v3", TicTacToe),
        ("tictactoe", TicTacToe),
        ("pettingzoo.classic.tictactoe_v3", TicTacToe),
        ("connect_four_v3", ConnectFour),
        ("connect_four", ConnectFour),
        ("pettingzoo.classic.connect_four_v3", ConnectFour),
        ("classic/connect_four-v3", ConnectFour),
    ],
)
def test_make_game_names(name, expected):
    assert isinstance(make_game(name), expected)


def test_make_game_unknown_name_lists_known_and_close_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown game 'tictactoe_v2'.*connect_four_v3.*did you mean 'tictactoe_v3'",
    ):
        make_game("tictactoe_v2")
    with pytest.raises(
        ValueError, match=r"known games are connect_four, connect_four_v3, tictactoe, tictactoe_v3$"
    ):
        make_game("chess_v6")


def test_state_from_observation_rejects_impossible_planes():
    game = ConnectFour()
    floating = np.zeros((6, 7, 2), dtype=np.int8)
    floating[4, 3, 1] = 1  # above an empty bottom cell
    with pytest.raises(ValueError, match="floats"):
        game.state_from_observation(floating)
    too_many = np.zeros((3, 3, 2), dtype=np.int8)
    too_many[0, :, 0] = 1
    with pytest.raises(ValueError, match="3 pieces and the opponent 0"):
        TicTacToe().state_from_observation(too_many)


def test_state_from_observation_rejects_the_waiting_players_view():
    env = tictactoe_v3.env()
    env.reset()
    env.step(4)
    env.step(0)
    with pytest.raises(ValueError, match="not the legal moves"):
        TicTacToe().state_from_observation(env.observe("player_2"))  # player_1 is to move
