"""Tic-tac-toe and Connect Four as `Game`s, move for move PettingZoo's envs.

The games are PettingZoo's ``tictactoe_v3`` and ``connect_four_v3``.

Player ``i`` is PettingZoo's ``possible_agents[i]`` (``pettingzoo_agents[i]``):
player 0 moves first. Actions, win and draw rules, rewards and observation
planes are PettingZoo's; unlike PettingZoo, an illegal action raises
ValueError instead of ending the game with a -1.

States are NamedTuples of small ints (one bitboard per player), so they are
immutable, hashable, equal across transpositions, and cheap to step::

    from hrl_tasks.planning.game import legal_actions

    game = make_game("connect_four_v3")
    state = game.initial_state()
    while not game.is_terminal(state):
        state = game.step(state, int(legal_actions(game, state)[0]))
    game.returns(state)  # array([ 1., -1.])
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hrl_tasks.planning.game import Game

NO_WINNER = -1

# Tic-tac-toe: bit ``a`` is PettingZoo's square ``a``, drawn at row a % 3, column a // 3,
# but shown in the observation planes at ``[a // 3, a % 3]`` (PettingZoo reshapes its flat list).
TICTACTOE_LINES = tuple(
    sum(1 << square for square in line)
    for line in (
        (0, 1, 2),
        (3, 4, 5),
        (6, 7, 8),
        (0, 3, 6),
        (1, 4, 7),
        (2, 5, 8),
        (0, 4, 8),
        (2, 4, 6),
    )
)
TICTACTOE_LINES_THROUGH = tuple(
    tuple(line for line in TICTACTOE_LINES if line >> square & 1) for square in range(9)
)
TICTACTOE_CELL_BITS = np.arange(9, dtype=np.int64).reshape(3, 3)
TICTACTOE_CELL_BITS.setflags(write=False)

# Connect Four: 7 bits per column, bit 7 * column + row with row 0 at the bottom; the 7th
# bit of each column stays empty, so that shifted lines never wrap from one column to the next.
CONNECT_FOUR_ROWS = 6
CONNECT_FOUR_COLUMNS = 7
CONNECT_FOUR_DIRECTIONS = (1, 7, 6, 8)  # vertical, horizontal, two diagonals
# PettingZoo's row 0 is the top one.
CONNECT_FOUR_CELL_BITS = np.array(
    [[7 * column + (5 - row) for column in range(7)] for row in range(6)], dtype=np.int64
)
CONNECT_FOUR_CELL_BITS.setflags(write=False)


class TicTacToeState(NamedTuple):
    """A tic-tac-toe position: one 9-bit board per player (bit ``a`` is square ``a``)."""

    board0: int
    board1: int
    moves: int
    winner: int = NO_WINNER


class ConnectFourState(NamedTuple):
    """A Connect Four position: one bitboard per player, 7 bits per column, bottom row first."""

    board0: int
    board1: int
    heights: tuple[int, ...]
    moves: int
    winner: int = NO_WINNER


def connect_four_has_four(board: int) -> bool:
    """Whether a Connect Four bitboard holds four in a line."""
    for shift in CONNECT_FOUR_DIRECTIONS:
        pairs = board & (board >> shift)
        if pairs & (pairs >> (2 * shift)):
            return True
    return False


@dataclasses.dataclass(frozen=True)
class TicTacToe:
    """PettingZoo's ``tictactoe_v3`` (agents ``player_1``, ``player_2``) as a `Game`.

    Action ``a`` marks PettingZoo's square ``a``; squares are numbered down the
    columns (0 3 6 / 1 4 7 / 2 5 8), and square ``a`` is observation cell ``[a // 3, a % 3]``.
    """

    name: ClassVar[str] = "tictactoe_v3"
    num_players: ClassVar[int] = 2
    num_actions: ClassVar[int] = 9
    observation_shape: ClassVar[tuple[int, ...]] = (3, 3, 2)
    pettingzoo_agents: ClassVar[tuple[str, str]] = ("player_1", "player_2")
    solvable: ClassVar[bool] = True
    """Small enough for a full minimax (about 5,500 states)."""
    opponents: ClassVar[tuple[str, ...]] = ("random", "minimax")
    """The evaluation opponents that fit the game (AlphaZero's default)."""

    def initial_state(self) -> TicTacToeState:
        """The empty board, player 0 to move."""
        return TicTacToeState(0, 0, 0)

    def to_play(self, state: TicTacToeState) -> int:
        """The player to move: 0 after an even number of moves."""
        return state.moves & 1

    def is_terminal(self, state: TicTacToeState) -> bool:
        """Whether someone has three in a line or the board is full."""
        return state.winner != NO_WINNER or state.moves == 9

    def legal_mask(self, state: TicTacToeState) -> np.ndarray:
        """The empty squares, or all False once the game is over."""
        if self.is_terminal(state):
            return np.zeros(9, dtype=bool)
        empty = 0x1FF & ~(state.board0 | state.board1)
        return (empty >> TICTACTOE_CELL_BITS.ravel()) & 1 == 1

    def step(self, state: TicTacToeState, action: int) -> TicTacToeState:
        """The position after the player to move marks square ``action``.

        Raises:
            ValueError: if the game is over or the square is taken or off the board.
        """
        action = operator.index(action)
        bit = 1 << action if 0 <= action < 9 else 0
        if not bit or (state.board0 | state.board1) & bit or self.is_terminal(state):
            raise _illegal_action(self, state, action)
        board0, board1 = state.board0, state.board1
        if state.moves & 1:
            board1 |= bit
            mover_board = board1
        else:
            board0 |= bit
            mover_board = board0
        won = any(mover_board & line == line for line in TICTACTOE_LINES_THROUGH[action])
        return TicTacToeState(
            board0, board1, state.moves + 1, state.moves & 1 if won else NO_WINNER
        )

    def returns(self, state: TicTacToeState) -> np.ndarray:
        """+1 for the winner, -1 for the loser, zeros for a draw or an unfinished game."""
        return _returns(state.winner)

    def observation(self, state: TicTacToeState) -> np.ndarray:
        """PettingZoo's int8 planes (3, 3, 2): the mover's marks, then the opponent's."""
        return _planes(state.board0, state.board1, state.moves & 1, TICTACTOE_CELL_BITS)

    def state_from_observation(self, observation: Mapping[str, Any] | np.ndarray) -> TicTacToeState:
        """The position PettingZoo's observation (dict or planes) of the player to move shows.

        Raises:
            ValueError: if the planes cannot come from a game between two players.
        """
        board0, board1, moves = _boards_from_planes(self, observation, TICTACTOE_CELL_BITS)
        wins = [any(board & line == line for line in TICTACTOE_LINES) for board in (board0, board1)]
        state = TicTacToeState(board0, board1, moves, _winner(self, wins, moves))
        _check_action_mask(self, state, observation)
        return state


@dataclasses.dataclass(frozen=True)
class ConnectFour:
    """PettingZoo's ``connect_four_v3`` (agents ``player_0``, ``player_1``) as a `Game`.

    Action ``c`` drops a piece in column ``c`` (0 leftmost); observation row 0 is the top row.
    """

    name: ClassVar[str] = "connect_four_v3"
    num_players: ClassVar[int] = 2
    num_actions: ClassVar[int] = CONNECT_FOUR_COLUMNS
    observation_shape: ClassVar[tuple[int, ...]] = (CONNECT_FOUR_ROWS, CONNECT_FOUR_COLUMNS, 2)
    pettingzoo_agents: ClassVar[tuple[str, str]] = ("player_0", "player_1")
    solvable: ClassVar[bool] = False
    """About 4.5e12 positions: a full minimax never ends."""
    opponents: ClassVar[tuple[str, ...]] = ("random", "alphabeta-2")
    """The evaluation opponents that fit the game (AlphaZero's default)."""

    def initial_state(self) -> ConnectFourState:
        """The empty board, player 0 to move."""
        return ConnectFourState(0, 0, (0,) * CONNECT_FOUR_COLUMNS, 0)

    def to_play(self, state: ConnectFourState) -> int:
        """The player to move: 0 after an even number of moves."""
        return state.moves & 1

    def is_terminal(self, state: ConnectFourState) -> bool:
        """Whether someone has four in a line or the board is full."""
        return state.winner != NO_WINNER or state.moves == CONNECT_FOUR_ROWS * CONNECT_FOUR_COLUMNS

    def legal_mask(self, state: ConnectFourState) -> np.ndarray:
        """The columns that are not full, or all False once the game is over."""
        if self.is_terminal(state):
            return np.zeros(CONNECT_FOUR_COLUMNS, dtype=bool)
        return np.array([height < CONNECT_FOUR_ROWS for height in state.heights])

    def step(self, state: ConnectFourState, action: int) -> ConnectFourState:
        """The position after the player to move drops a piece in column ``action``.

        Raises:
            ValueError: if the game is over or the column is full or off the board.
        """
        action = operator.index(action)
        heights = state.heights
        if not 0 <= action < CONNECT_FOUR_COLUMNS or heights[action] >= CONNECT_FOUR_ROWS:
            raise _illegal_action(self, state, action)
        if self.is_terminal(state):
            raise _illegal_action(self, state, action)
        bit = 1 << (7 * action + heights[action])
        board0, board1 = state.board0, state.board1
        if state.moves & 1:
            board1 |= bit
            mover_board = board1
        else:
            board0 |= bit
            mover_board = board0
        winner = state.moves & 1 if connect_four_has_four(mover_board) else NO_WINNER
        heights = heights[:action] + (heights[action] + 1,) + heights[action + 1 :]
        return ConnectFourState(board0, board1, heights, state.moves + 1, winner)

    def returns(self, state: ConnectFourState) -> np.ndarray:
        """+1 for the winner, -1 for the loser, zeros for a draw or an unfinished game."""
        return _returns(state.winner)

    def observation(self, state: ConnectFourState) -> np.ndarray:
        """PettingZoo's int8 planes (6, 7, 2): the mover's pieces, then the opponent's."""
        return _planes(state.board0, state.board1, state.moves & 1, CONNECT_FOUR_CELL_BITS)

    def state_from_observation(
        self, observation: Mapping[str, Any] | np.ndarray
    ) -> ConnectFourState:
        """The position PettingZoo's observation (dict or planes) of the player to move shows.

        Raises:
            ValueError: if the planes cannot come from a game between two players
                (pieces floating above an empty cell, wrong piece counts, ...).
        """
        board0, board1, moves = _boards_from_planes(self, observation, CONNECT_FOUR_CELL_BITS)
        occupied = board0 | board1
        heights = tuple((occupied >> (7 * column) & 0x7F).bit_length() for column in range(7))
        if any(occupied >> (7 * c) & 0x7F != (1 << h) - 1 for c, h in enumerate(heights)):
            raise ValueError(f"{self.name}: a piece floats above an empty cell")
        wins = [connect_four_has_four(board0), connect_four_has_four(board1)]
        state = ConnectFourState(board0, board1, heights, moves, _winner(self, wins, moves))
        _check_action_mask(self, state, observation)
        return state


GAMES: dict[str, type] = {"tictactoe_v3": TicTacToe, "connect_four_v3": ConnectFour}
GAME_ALIASES = {"tictactoe": "tictactoe_v3", "connect_four": "connect_four_v3"}


def make_game(name: str) -> Game:
    """The game PettingZoo's env ``name`` plays.

    Args:
        name: ``"tictactoe_v3"`` or ``"connect_four_v3"``, without the version suffix,
            or as a module path (``"pettingzoo.classic.tictactoe_v3"``).

    Raises:
        ValueError: for other names, listing the known ones and the closest matches.
    """
    short = name.strip().rsplit(".", 1)[-1].rsplit("/", 1)[-1].replace("-", "_").lower()
    short = GAME_ALIASES.get(short, short)
    if short in GAMES:
        return GAMES[short]()
    known = sorted([*GAMES, *GAME_ALIASES])
    close = difflib.get_close_matches(short, known, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise ValueError(f"unknown game {name!r}: known games are {', '.join(known)}{hint}")


def _returns(winner: int) -> np.ndarray:
    outcome = np.zeros(2)
    if winner != NO_WINNER:
        outcome[winner], outcome[1 - winner] = 1.0, -1.0
    return outcome


def _planes(board0: int, board1: int, mover: int, cell_bits: np.ndarray) -> np.ndarray:
    mine, theirs = (board1, board0) if mover else (board0, board1)
    planes = np.empty((*cell_bits.shape, 2), dtype=np.int8)
    planes[..., 0] = (mine >> cell_bits) & 1
    planes[..., 1] = (theirs >> cell_bits) & 1
    return planes


def _boards_from_planes(
    game: Game, observation: Mapping[str, Any] | np.ndarray, cell_bits: np.ndarray
) -> tuple[int, int, int]:
    """(board0, board1, moves) from the mover's planes; the mover follows from the piece counts."""
    planes = np.asarray(
        observation["observation"] if isinstance(observation, Mapping) else observation
    )
    if planes.shape != game.observation_shape:
        raise ValueError(
            f"{game.name}: planes of shape {planes.shape}, expected {game.observation_shape}"
        )
    if not np.isin(planes, (0, 1)).all() or (planes[..., 0] & planes[..., 1]).any():
        raise ValueError(f"{game.name}: planes must hold 0 and 1, with no cell in both")
    mine, theirs = (int((planes[..., k].astype(np.int64) << cell_bits).sum()) for k in (0, 1))
    my_count, their_count = mine.bit_count(), theirs.bit_count()
    if my_count == their_count:  # player 0 to move
        return mine, theirs, my_count + their_count
    if their_count == my_count + 1:  # player 1 to move
        return theirs, mine, my_count + their_count
    raise ValueError(
        f"{game.name}: the mover has {my_count} pieces and the opponent {their_count}; "
        "the player to move has as many as the opponent (player 0) or one fewer (player 1)"
    )


def _winner(game: Game, wins: list[bool], moves: int) -> int:
    """Who has a line: only the last mover can, as the game ends at the first line."""
    last_mover = (moves - 1) & 1
    if wins[1 - last_mover]:
        raise ValueError(f"{game.name}: the player to move already has a line")
    return last_mover if wins[last_mover] else NO_WINNER


def _check_action_mask(game: Game, state: Any, observation: Mapping[str, Any] | np.ndarray) -> None:
    """A dict's action mask, before the end, must be the mover's legal moves."""
    if not isinstance(observation, Mapping) or "action_mask" not in observation:
        return
    if game.is_terminal(state):  # PettingZoo keeps listing empty cells after a win
        return
    action_mask = np.asarray(observation["action_mask"])
    if not np.array_equal(action_mask != 0, game.legal_mask(state)):
        raise ValueError(
            f"{game.name}: the action mask {action_mask.tolist()} is not "
            "the legal moves; is the observation from the player to move?"
        )


def _illegal_action(game: Game, state: Any, action: int) -> ValueError:
    if game.is_terminal(state):
        return ValueError(f"{game.name}: action {action} is illegal, the game is over")
    legal = np.flatnonzero(game.legal_mask(state)).tolist()
    return ValueError(f"{game.name}: action {action} is illegal; legal actions are {legal}")
