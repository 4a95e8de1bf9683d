"""Fixed opponents for two-player `Game`s, and matches between players.

A `Player` picks a legal action in a state; `play_match` measures one player
against another, alternating who moves first::

    game = make_game("connect_four_v3")
    rng = np.random.default_rng(0)
    play_match(game, AlphaBetaPlayer(depth=4), RandomPlayer(), games=20, rng=rng)
    # {'wins': 20, 'draws': 0, 'losses': 0, 'games': 20, 'win_rate': 1.0, 'score': 1.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hrl_tasks.planning.game import Game, State, legal_actions
from hrl_tasks.planning.games import ConnectFour, ConnectFourState, connect_four_has_four

# Connect Four bitboards as in `games`: 7 bits per column, bottom row first, the 7th bit empty.
CENTER_FIRST = (3, 2, 4, 1, 5, 0, 6)
COLUMN_BOTTOM = tuple(1 << (7 * column) for column in range(7))
COLUMN_TOP = tuple(1 << (7 * column + 5) for column in range(7))
COLUMN_CELLS = tuple(0x3F << (7 * column) for column in range(7))
BOARD_CELLS = sum(COLUMN_CELLS)
BOARD_SIZE = 42
LINE_DIRECTIONS = (1, 7, 6, 8)  # vertical, horizontal, two diagonals
WIN_VALUE = 1000  # minus the moves played before the win, so faster wins are worth more
UNBOUNDED = 10**6


@runtime_checkable
class Player(Protocol):
    """Picks moves: ``action = player.act(game, state, rng)`` is legal in ``state``."""

    name: str

    def act(self, game: Game, state: State, rng: np.random.Generator) -> int:
        """A legal action for ``game.to_play(state)``; ``state`` is not terminal."""


class RandomPlayer:
    """Uniformly random among the legal actions."""

    name = "random"

    def act(self, game: Game, state: State, rng: np.random.Generator) -> int:
        """A uniformly random legal action."""
        return int(rng.choice(legal_actions(game, state)))


class MinimaxPlayer:
    """Perfect play by full minimax, for games small enough to solve (tic-tac-toe).

    Each mover maximises its own return; values of solved states are kept in a
    dict of this player (about 5,500 states for tic-tac-toe). Equally good moves
    are chosen uniformly at random, so games against it differ.
    """

    name = "minimax"

    def __init__(self) -> None:
        self._values_by_game: dict[str, dict[Any, tuple[float, ...]]] = {}

    def act(self, game: Game, state: State, rng: np.random.Generator) -> int:
        """A uniformly random one of the moves with the best outcome under perfect play."""
        mover = game.to_play(state)
        actions = legal_actions(game, state).tolist()
        outcomes = [self.value(game, game.step(state, action))[mover] for action in actions]
        best = max(outcomes)
        return int(
            rng.choice([a for a, outcome in zip(actions, outcomes, strict=True) if outcome == best])
        )

    def value(self, game: Game, state: State) -> tuple[float, ...]:
        """Every player's return from ``state`` under perfect play."""
        values = self._values_by_game.setdefault(game.name, {})
        if state not in values:
            if game.is_terminal(state):
                values[state] = tuple(game.returns(state).tolist())
            else:
                mover = game.to_play(state)
                children = (game.step(state, a) for a in legal_actions(game, state).tolist())
                values[state] = max((self.value(game, c) for c in children), key=lambda v: v[mover])
        return values[state]


class AlphaBetaPlayer:
    """Connect Four by depth-limited negamax with alpha-beta pruning.

    Positions ``depth`` moves ahead are valued by open threes (windows of four
    cells in a line with three of a player's pieces and one empty cell): the
    mover's count minus the opponent's. A win is worth ``WIN_VALUE`` minus the
    moves played before it. Moves are searched center column first; equally
    valued moves are chosen uniformly at random.
    """

    def __init__(self, depth: int = 4) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.depth = depth
        self.name = f"alphabeta(depth={depth})"

    def act(self, game: Game, state: ConnectFourState, rng: np.random.Generator) -> int:
        """A uniformly random one of the best valued columns.

        Raises:
            TypeError: if ``game`` is not `ConnectFour`.
            ValueError: if the game is over.
        """
        values = self.column_values(game, state)
        best = max(values.values())
        return int(rng.choice(sorted(c for c, value in values.items() if value == best)))

    def column_values(self, game: Game, state: ConnectFourState) -> dict[int, int]:
        """The mover's value of each legal column: exact for the best, upper bounds for the rest."""
        if not isinstance(game, ConnectFour):
            raise TypeError(f"{self.name} plays Connect Four only, not {game.name}")
        if game.is_terminal(state):
            raise ValueError(f"{self.name}: the game is over")
        mask = state.board0 | state.board1
        own = state.board1 if state.moves & 1 else state.board0
        values: dict[int, int] = {}
        best = -UNBOUNDED
        for column in CENTER_FIRST:
            if mask & COLUMN_TOP[column]:
                continue
            piece = (mask + COLUMN_BOTTOM[column]) & COLUMN_CELLS[column]
            if connect_four_has_four(own | piece):
                value = WIN_VALUE - state.moves
            else:  # a window just below best, so that ties with best come out exact
                value = -_negamax(
                    own ^ mask, mask | piece, state.moves + 1, self.depth - 1, -UNBOUNDED, 1 - best
                )
            values[column] = value
            best = max(best, value)
        return values


def _negamax(own: int, mask: int, moves: int, depth: int, alpha: int, beta: int) -> int:
    """A Connect Four position's value for the mover (pieces ``own``), clipped to [alpha, beta]."""
    if moves == BOARD_SIZE:
        return 0
    if depth == 0:
        empty = BOARD_CELLS ^ mask
        return _open_threes(own, empty) - _open_threes(own ^ mask, empty)
    pieces = []
    for column in CENTER_FIRST:
        if mask & COLUMN_TOP[column]:
            continue
        piece = (mask + COLUMN_BOTTOM[column]) & COLUMN_CELLS[column]
        if connect_four_has_four(own | piece):
            return WIN_VALUE - moves
        pieces.append(piece)
    opponent = own ^ mask
    for piece in pieces:
        value = -_negamax(opponent, mask | piece, moves + 1, depth - 1, -beta, -alpha)
        if value >= beta:
            return beta
        alpha = max(alpha, value)
    return alpha


def _open_threes(pieces: int, empty: int) -> int:
    """How many windows of four cells in a line hold three of ``pieces`` and one ``empty`` cell."""
    count = 0
    for step in LINE_DIRECTIONS:
        p1, p2, p3 = pieces >> step, pieces >> (2 * step), pieces >> (3 * step)
        e1, e2, e3 = empty >> step, empty >> (2 * step), empty >> (3 * step)
        windows = (
            (empty & p1 & p2 & p3)
            | (pieces & e1 & p2 & p3)
            | (pieces & p1 & e2 & p3)
            | (pieces & p1 & p2 & e3)
        )
        count += windows.bit_count()
    return count


def play_game(game: Game, players: Sequence[Player], rng: np.random.Generator) -> np.ndarray:
    """Play one game, ``players[i]`` as player ``i``; the returns at its end."""
    if len(players) != game.num_players:
        raise ValueError(f"{game.name} needs {game.num_players} players, got {len(players)}")
    state = game.initial_state()
    while not game.is_terminal(state):
        state = game.step(state, players[game.to_play(state)].act(game, state, rng))
    return game.returns(state)


def play_match(
    game: Game,
    player: Player,
    opponent: Player,
    games: int,
    rng: np.random.Generator,
    seat: int | None = None,
) -> dict[str, float]:
    """``player``'s results over ``games`` two-player games against ``opponent``.

    ``player`` moves first in games 0, 2, 4, ... and second in the others, or
    always as player ``seat`` (0: first) when it is given.

    Returns:
        ``wins``, ``draws``, ``losses``, ``games``, ``win_rate`` (wins / games) and
        ``score`` ((wins + draws / 2) / games), all from ``player``'s side.
    """
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    wins = draws = losses = 0
    fixed = seat
    for k in range(games):
        seat = k % 2 if fixed is None else fixed
        seats = [player, opponent] if seat == 0 else [opponent, player]
        outcome = play_game(game, seats, rng)[seat]
        wins += int(outcome > 0)
        draws += int(outcome == 0)
        losses += int(outcome < 0)
    return {
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "games": games,
        "win_rate": wins / games,
        "score": (wins + 0.5 * draws) / games,
    }


class PolicyPlayer:
    """A trained algorithm's policy as a `Player`: it sees the state as PettingZoo's
    observation dict (``observation`` and ``action_mask``) and acts greedily through
    ``algo.compute_single_action(observation, policy_id=...)``."""

    def __init__(self, algo: Any, policy_id: Any = None, name: str | None = None) -> None:
        self.algo, self.policy_id = algo, policy_id
        self.name = name or f"{getattr(algo, 'name', 'policy')}:{policy_id}"

    def act(self, game: Game, state: State, rng: np.random.Generator) -> int:
        observation = {
            "observation": game.observation(state),
            "action_mask": game.legal_mask(state).astype(np.int8),
        }
        return int(self.algo.compute_single_action(observation, policy_id=self.policy_id))


def check_opponent(name: str, game: Game) -> None:
    """Raise ValueError if opponent ``name`` is unknown or cannot play ``game`` in
    reasonable time (a full minimax of a game too large to solve)."""
    parse_opponent(name)
    if name == "minimax" and not getattr(game, "solvable", False):
        known = ", ".join(getattr(game, "opponents", ("random",)))
        raise ValueError(
            f"opponent 'minimax' solves the whole game tree, and {game.name}'s is too large to "
            f"finish; use alphabeta-N or uct-N (e.g. alphabeta-4, uct-1000; the default is {known})"
        )


def parse_opponent(name: str) -> Player:
    """An opponent by name: ``random``, ``minimax`` (perfect play, small games),
    ``alphabeta-N`` (Connect Four, depth N) or ``uct-N`` (UCT-MCTS, N random-rollout
    simulations).

    Raises:
        ValueError: for a name of none of these forms.
    """
    from hrl_tasks.planning.mcts import uct_player

    kind, _, number = name.partition("-")
    if name == "random":
        return RandomPlayer()
    if name == "minimax":
        return MinimaxPlayer()
    if kind in ("alphabeta", "uct") and number.isdigit() and int(number) > 0:
        player = (
            AlphaBetaPlayer(depth=int(number)) if kind == "alphabeta" else uct_player(int(number))
        )
        player.name = name
        return player
    raise ValueError(
        f"unknown opponent {name!r}; known: random, minimax, alphabeta-N (e.g. alphabeta-4), "
        "uct-N (e.g. uct-1000)"
    )
