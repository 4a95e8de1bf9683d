"""Gumbel AlphaZero's search rule (Danihelka et al., ICLR 2022), as pure arithmetic.

At the root, actions are drawn without replacement by the Gumbel-top-k trick
(``gumbel + logits``) and compared by sequential halving: the simulations go in
rounds to fewer and fewer of them, and the one left is the move. Below the root
a simulation takes the action whose share of visits lags most behind the
improved policy ``softmax(logits + sigma(completed Q))``. The improved policy at
the root is also what the network learns from: with few simulations it improves
on the prior where visit counts would not.

The names and constants follow DeepMind's mctx (``gumbel_muzero_policy``,
``qtransform_completed_by_mix_value``, ``seq_halving``): ``c_visit`` 50 and
``c_scale`` 0.1, completed Q-values rescaled to [0, 1] over a node's actions, and
an unvisited action's value taken from the node's mixed value.

Every function here takes a node's arrays (``prior`` probabilities, ``visits``,
``value_sums`` from the node's mover's view, the network's ``value`` of the node,
its legal ``mask``) and returns arrays or an action; the tree lives in
`hrl_tasks.planning.mcts`.
"""

from __future__ import annotations

import math

import numpy as np

LOW_LOGIT = -1e9  # mctx's floor, so that an action with prior 0 still ranks


def considered_visits(max_considered: int, simulations: int) -> tuple[int, ...]:
    """How many visits the root action taken at each simulation should already have.

    Sequential halving over ``max_considered`` actions with ``simulations``
    simulations: each round gives every remaining action
    ``max(1, simulations // (ceil(log2 max_considered) * remaining))`` visits, then
    keeps the better half (never fewer than 2). Entry ``i`` is the visit count the
    ``i``-th simulation's root action must have (mctx's
    ``get_sequence_of_considered_visits``).
    """
    if max_considered <= 1:
        return tuple(range(simulations))
    log2max = math.ceil(math.log2(max_considered))
    sequence: list[int] = []
    visits = [0] * max_considered
    considered = max_considered
    while len(sequence) < simulations:
        extra = max(1, int(simulations / (log2max * considered)))
        for _ in range(extra):
            sequence.extend(visits[:considered])
            for i in range(considered):
                visits[i] += 1
        considered = max(2, considered // 2)
    return tuple(sequence[:simulations])


def considered_table(max_considered: int, simulations: int) -> list[tuple[int, ...]]:
    """``considered_visits(k, simulations)`` for every ``k`` from 0 to ``max_considered``."""
    return [considered_visits(k, simulations) for k in range(max_considered + 1)]


def mixed_value(
    value: float, prior: np.ndarray, visits: np.ndarray, q: np.ndarray, mask: np.ndarray
) -> float:
    """The node's value for its unvisited actions: the network's value mixed with
    the prior-weighted mean Q of the visited ones, by visit count."""
    visited = (visits > 0) & mask
    total = visits[visited].sum()
    if total <= 0:
        return float(value)
    weights = np.maximum(prior[visited], np.finfo(float).tiny)
    weighted_q = float((weights * q[visited]).sum() / weights.sum())
    return float((value + total * weighted_q) / (total + 1))


def completed_q(
    value: float, prior: np.ndarray, visits: np.ndarray, value_sums: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """Q of every legal action, unvisited ones completed with the mixed value, then
    rescaled to [0, 1] over the legal actions (0 at illegal ones)."""
    q = np.divide(value_sums, visits, out=np.zeros_like(value_sums), where=visits > 0)
    completed = np.where(visits > 0, q, mixed_value(value, prior, visits, q, mask))
    legal = completed[mask]
    low, high = legal.min(), legal.max()
    rescaled = (completed - low) / max(high - low, 1e-8)
    return np.where(mask, rescaled, 0.0)


def sigma(completed: np.ndarray, visits: np.ndarray, c_visit: float, c_scale: float) -> np.ndarray:
    """The monotone transform of completed Q-values that is added to logits:
    ``(c_visit + max visits) * c_scale * q``."""
    return (c_visit + visits.max()) * c_scale * completed


def logits_of(prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Log-priors of the legal actions, shifted so the largest is 0 (-inf elsewhere)."""
    with np.errstate(divide="ignore"):
        logits = np.where(mask, np.log(prior), -np.inf)
    return logits - logits[mask].max()


def improved_policy(logits: np.ndarray, transformed_q: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``softmax(logits + sigma(completed Q))`` over the legal actions: the policy
    target, and what the interior selection follows."""
    scores = np.where(mask, np.maximum(logits, LOW_LOGIT) + transformed_q, -np.inf)
    scores = scores - scores[mask].max()
    weights = np.where(mask, np.exp(scores), 0.0)
    return weights / weights.sum()


def interior_action(policy: np.ndarray, visits: np.ndarray, mask: np.ndarray) -> int:
    """The action whose visits lag most behind ``policy``:
    ``argmax policy - visits / (1 + total visits)``."""
    score = policy - visits / (1.0 + visits.sum())
    return int(np.argmax(np.where(mask, score, -np.inf)))


def root_action(
    gumbel: np.ndarray,
    logits: np.ndarray,
    transformed_q: np.ndarray,
    visits: np.ndarray,
    considered_visit: float,
    mask: np.ndarray,
) -> int:
    """Sequential halving's pick: among the legal actions with exactly
    ``considered_visit`` visits, the highest ``gumbel + logits + sigma(Q)``."""
    score = np.maximum(LOW_LOGIT, gumbel + logits + transformed_q)
    eligible = mask & (visits == considered_visit)
    if not eligible.any():  # virtual visits of a batch in flight: the closest count
        eligible = mask & (visits == visits[mask].min())
    return int(np.argmax(np.where(eligible, score, -np.inf)))


def final_action(
    gumbel: np.ndarray,
    logits: np.ndarray,
    transformed_q: np.ndarray,
    visits: np.ndarray,
    mask: np.ndarray,
) -> int:
    """The move sequential halving leaves: the highest ``gumbel + logits + sigma(Q)``
    among the actions of its last round.

    mctx takes only the most visited. A budget that ends inside the last round (or a
    batch's order within it) can leave its actions one visit apart, and the score must
    decide between them, not that visit: here the last round is every visited action
    within one visit of the most visited.
    """
    most = visits[mask].max()
    last_round = mask & (visits >= max(most - 1, min(most, 1)))
    score = np.maximum(LOW_LOGIT, gumbel + logits + transformed_q)
    return int(np.argmax(np.where(last_round, score, -np.inf)))
