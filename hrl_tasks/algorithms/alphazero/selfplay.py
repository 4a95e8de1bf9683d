"""What AlphaZero's tasks run: a self-play game, and an evaluation game against an opponent.

Both are plain functions of picklable arguments, so the engine can retry them
on another worker. A move's search runs in the task itself, or is split into
sub-tree tasks (`parallel_search`) when its budget is large enough.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from hrl_tasks.planning.game import Game
from hrl_tasks.planning.mcts import SearchConfig, search
from hrl_tasks.planning.opponents import parse_opponent
from hrl_tasks.planning.parallel import ParallelConfig, parallel_search


def searched_move(
    game: Game,
    state,
    leaves: Any,
    weights: Any,
    config: SearchConfig,
    parallel: ParallelConfig | None,
    rng: np.random.Generator,
    root_noise: bool,
):
    """One move's search: in this task, or split into sub-tree tasks."""
    if parallel is not None and config.simulations >= parallel.split_min:
        if not root_noise:
            config = SearchConfig(**{**config.__dict__, "dirichlet_fraction": 0.0})
        return parallel_search(
            game, state, leaves, config, parallel, int(rng.integers(2**62)), weights
        )
    evaluate = leaves.resolve(game, rng, weights)
    return search(game, state, evaluate, config, rng, root_noise=root_noise)


def self_play_game(
    game: Game,
    leaves: Any,
    weights: Any,
    config: SearchConfig,
    parallel: ParallelConfig | None,
    temperature_moves: int,
    seed: int,
    fast: SearchConfig | None = None,
    full_fraction: float = 1.0,
) -> dict[str, Any]:
    """Plays one game against itself; every position searched in full with its
    search policy, the game's outcome from the view of the player who moved there
    (``value``) and the search's mean value of the position for that player
    (``search_value``).

    With ``fast`` (playout-cap randomization, KataGo): each move is searched in full
    (``config``, root noise) with probability ``full_fraction``, else by the cheaper
    ``fast`` search without noise, and only full searches' positions are kept.
    """
    rng = np.random.default_rng(seed)
    if parallel is not None and isinstance(weights, dict):
        from hrl_tasks.scheduler import current_engine

        weights = current_engine().put(weights)  # once per game for its sub-tree tasks
    state = game.initial_state()
    observations, masks, policies, players, search_values = [], [], [], [], []
    moves, simulations, batch_sizes, start = 0, 0, Counter(), time.perf_counter()
    while not game.is_terminal(state):
        full = fast is None or rng.random() < full_fraction
        if full:
            result = searched_move(game, state, leaves, weights, config, parallel, rng, True)
            observations.append(game.observation(state))
            masks.append(game.legal_mask(state))
            policies.append(result.policy_target)
            players.append(game.to_play(state))
            search_values.append(result.value_vector_sum[result.to_play] / result.simulations)
        else:
            result = searched_move(game, state, leaves, weights, fast, None, rng, False)
        moves += 1
        simulations += result.simulations
        batch_sizes.update(result.batch_sizes)
        temperature = 1.0 if moves <= temperature_moves else 0.0
        state = game.step(state, result.choose(temperature, rng))
    returns = np.asarray(game.returns(state), dtype=np.float32)
    shape = tuple(game.observation_shape)
    return {
        "obs": np.stack(observations).astype(np.int8)
        if observations
        else np.zeros((0, *shape), np.int8),
        "mask": np.stack(masks) if masks else np.zeros((0, game.num_actions), bool),
        "policy": np.stack(policies).astype(np.float32)
        if policies
        else np.zeros((0, game.num_actions), np.float32),
        "value": returns[np.asarray(players, dtype=int)],
        "search_value": np.asarray(search_values, dtype=np.float32),
        "moves": moves,
        "positions": len(players),
        "returns": returns,
        "simulations": simulations,
        "search_s": time.perf_counter() - start,
        "batch_sizes": dict(batch_sizes),
    }


def evaluation_game(
    game: Game,
    leaves: Any,
    weights: Any,
    config: SearchConfig,
    opponent: str,
    agent_player: int,
    seed: int,
    time_budget_s: float | None = None,
) -> float | None:
    """One game of the searching agent (greedy, no root noise) against ``opponent``
    (a name `parse_opponent` knows); returns the agent's outcome, or None if the
    game was still on ``time_budget_s`` after it began (checked before each move)."""
    rng = np.random.default_rng(seed)
    rival = parse_opponent(opponent)
    state = game.initial_state()
    give_up_at = None if time_budget_s is None else time.monotonic() + time_budget_s
    while not game.is_terminal(state):
        if give_up_at is not None and time.monotonic() >= give_up_at:
            return None
        if game.to_play(state) == agent_player:
            result = searched_move(game, state, leaves, weights, config, None, rng, False)
            action = result.choose(0.0, rng)
        else:
            action = rival.act(game, state, rng)
        state = game.step(state, action)
    return float(game.returns(state)[agent_player])
