"""Symmetries of board games, to multiply training positions (AlphaZero's augmentation).

A symmetry maps a position's observation planes and its action vectors (legal
mask, search policy) together: tic-tac-toe has the eight of the square (an
action is a cell, numbered row by row in the observation's grid), Connect Four
the left-right mirror (an action is a column). Other games get none.
"""

from __future__ import annotations

import numpy as np

from hrl_tasks.planning.game import Game


def symmetries(
    game: Game, observations: np.ndarray, masks: np.ndarray, policies: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every position in every symmetric form, identity first.

    Args:
        game: Decides which symmetries apply (by ``game.name``).
        observations: ``[N, H, W, C]`` planes.
        masks: ``[N, A]`` legal actions.
        policies: ``[N, A]`` search policies.

    Returns:
        The three arrays, each ``[k * N, ...]`` for the game's ``k`` symmetries.
    """
    if game.name.startswith("connect_four"):
        return (
            np.concatenate([observations, observations[:, :, ::-1]]),
            np.concatenate([masks, masks[:, ::-1]]),
            np.concatenate([policies, policies[:, ::-1]]),
        )
    if game.name.startswith("tictactoe"):
        n, height, width = observations.shape[:3]
        grids = [masks.reshape(n, height, width), policies.reshape(n, height, width)]
        out_obs, out_masks, out_policies = [], [], []
        for flip in (False, True):
            for turns in range(4):
                obs, mask, policy = observations, *grids
                if flip:
                    obs, mask, policy = obs[:, :, ::-1], mask[:, :, ::-1], policy[:, :, ::-1]
                obs, mask, policy = (np.rot90(x, turns, axes=(1, 2)) for x in (obs, mask, policy))
                out_obs.append(obs)
                out_masks.append(mask.reshape(n, -1))
                out_policies.append(policy.reshape(n, -1))
        return np.concatenate(out_obs), np.concatenate(out_masks), np.concatenate(out_policies)
    return observations, masks, policies
