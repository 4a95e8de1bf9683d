"""Fixed opponents: random, perfect tic-tac-toe, alpha-beta Connect Four; matches."""

import time

import numpy as np
import pytest

from hrl_tasks.planning.games import ConnectFour, TicTacToe
from hrl_tasks.planning.opponents import (
    AlphaBetaPlayer,
    MinimaxPlayer,
    Player,
    RandomPlayer,
    play_game,
    play_match,
)


class OpeningCounter:
    """A random player that counts the games in which it made the first move."""

    name = "opening-counter"

    def __init__(self):
        self.openings = 0

    def act(self, game, state, rng):
        self.openings += state == game.initial_state()
        return RandomPlayer().act(game, state, rng)


def position(game, actions):
    state = game.initial_state()
    for action in actions:
        state = game.step(state, action)
    return state


def test_players_follow_the_protocol():
    for player in (RandomPlayer(), MinimaxPlayer(), AlphaBetaPlayer(), OpeningCounter()):
        assert isinstance(player, Player)


def test_random_player_plays_every_legal_action():
    game = ConnectFour()
    state = position(game, [0] * 6)
    rng = np.random.default_rng(0)
    assert {RandomPlayer().act(game, state, rng) for _ in range(200)} == {1, 2, 3, 4, 5, 6}


def test_minimax_never_loses_to_random():
    results = play_match(
        TicTacToe(), MinimaxPlayer(), RandomPlayer(), 200, np.random.default_rng(0)
    )
    assert results["losses"] == 0
    assert results["wins"] > 150


def test_minimax_against_itself_always_draws():
    results = play_match(
        TicTacToe(), MinimaxPlayer(), MinimaxPlayer(), 20, np.random.default_rng(0)
    )
    assert results["draws"] == 20


def test_minimax_chooses_among_equally_good_moves_at_random():
    game, player, rng = TicTacToe(), MinimaxPlayer(), np.random.default_rng(0)
    assert player.value(game, game.initial_state()) == (0.0, 0.0)
    assert {player.act(game, game.initial_state(), rng) for _ in range(200)} == set(range(9))


def test_alphabeta_beats_random():
    results = play_match(
        ConnectFour(), AlphaBetaPlayer(depth=4), RandomPlayer(), 40, np.random.default_rng(0)
    )
    assert results["win_rate"] >= 0.95


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([3, 3, 2, 2, 1, 1], {0, 4}),  # player 0 completes the bottom row
        ([3, 0, 3, 0, 3], {3}),  # player 1 blocks the column
        ([3, 0, 3, 0, 3, 0], {3}),  # player 0 wins rather than blocks
        ([0, 1, 1, 2, 3, 2, 2, 3, 4, 3], {3}),  # player 0 completes a diagonal
    ],
)
def test_alphabeta_wins_at_once_and_blocks(actions, expected):
    game, rng = ConnectFour(), np.random.default_rng(0)
    state = position(game, actions)
    chosen = {AlphaBetaPlayer(depth=4).act(game, state, rng) for _ in range(20)}
    assert chosen == expected


def test_alphabeta_depth_4_is_fast():
    game, player, rng = ConnectFour(), AlphaBetaPlayer(depth=4), np.random.default_rng(0)
    state, seconds = game.initial_state(), []
    while not game.is_terminal(state):
        start = time.perf_counter()
        action = player.act(game, state, rng)
        seconds.append(time.perf_counter() - start)
        state = game.step(state, action)
    assert np.mean(seconds) < 0.05  # about 1 ms on an idle machine


def test_alphabeta_plays_connect_four_only():
    with pytest.raises(TypeError, match="Connect Four only"):
        AlphaBetaPlayer().act(TicTacToe(), TicTacToe().initial_state(), np.random.default_rng(0))


def test_play_match_alternates_who_moves_first():
    player, opponent = OpeningCounter(), OpeningCounter()
    results = play_match(TicTacToe(), player, opponent, 7, np.random.default_rng(0))
    assert (player.openings, opponent.openings) == (4, 3)
    assert results["wins"] + results["draws"] + results["losses"] == results["games"] == 7
    assert results["win_rate"] == results["wins"] / 7
    assert results["score"] == (results["wins"] + 0.5 * results["draws"]) / 7


def test_play_game_returns_the_final_returns():
    returns = play_game(
        ConnectFour(), [AlphaBetaPlayer(), RandomPlayer()], np.random.default_rng(0)
    )
    assert sorted(returns.tolist()) in ([-1.0, 1.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="needs 2 players"):
        play_game(ConnectFour(), [RandomPlayer()], np.random.default_rng(0))
