"""What tree search needs of a game, and gymnasium and PettingZoo envs lack.

A `Game` is a set of pure functions over immutable, hashable states: search
copies a state by keeping a reference, and restores one by using it again.
Players are numbered from 0; ``to_play(state)`` is the one to move (always 0
in single-player games). Values are from a player's own view: ``returns(state)``
at a terminal state holds one entry per player (+1 win, -1 loss, 0 draw in the
two-player classic games; the episode's return in single-player ones).

``observation(state)`` is what a network sees, from the view of the player to
move, in PettingZoo's layout for the classic games (planes ``[..., 0]`` the
mover's pieces, ``[..., 1]`` the opponent's), so that a network trained on
search states acts on PettingZoo's observations unchanged;
``state_from_observation`` goes back.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

State = Hashable


@runtime_checkable
class Game(Protocol):
    """A deterministic turn-based game (or a single-player model) for search."""

    name: str
    num_players: int
    num_actions: int
    observation_shape: tuple[int, ...]

    def initial_state(self) -> State:
        """The state before the first move."""

    def to_play(self, state: State) -> int:
        """The player to move (0-based)."""

    def legal_mask(self, state: State) -> np.ndarray:
        """Bool array of length ``num_actions``; all False at a terminal state."""

    def step(self, state: State, action: int) -> State:
        """The state after ``action``; ``state`` is not changed. Illegal actions raise ValueError."""

    def is_terminal(self, state: State) -> bool:
        """Whether the game is over."""

    def returns(self, state: State) -> np.ndarray:
        """Float array of length ``num_players``: each player's outcome at a terminal state."""

    def observation(self, state: State) -> np.ndarray:
        """The network's input, from the view of ``to_play(state)``."""

    def state_from_observation(self, observation: Mapping[str, Any] | np.ndarray) -> State:
        """The state an observation (PettingZoo's dict or its planes) shows."""


def legal_actions(game: Game, state: State) -> np.ndarray:
    """The legal actions' indices, ascending."""
    return np.flatnonzero(game.legal_mask(state))
