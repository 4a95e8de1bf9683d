"""Tree search as a tree of tasks: sub-trees searched by nested tasks, merged at the root.

Sub-tree mode (`ParallelConfig(mode="subtree")`): a node with a large budget
first searches serially for a warm-up share of it, then divides the rest among
its children as PUCT would if their values stayed as the warm-up found them,
and hands each child its share as a task. A child whose share is still large
splits again, to ``max_depth``. Each task returns its sub-tree's totals (the
simulations it ran and the sum of their values), which is exactly what the
parent's edge would have collected had it run them itself, so the merge is a
sum. Root mode: ``trees`` independent searches of the root with their own
seeds, visit counts summed.

The plan, in one screen::

    subtree_search(node, budget):
        if budget small or deep enough:  return search(node, budget)       # serial, batched
        warm = search(node, warm-up share)                                 # root statistics
        shares = allocate(warm, budget - warm-up share)                    # PUCT, values held
        results = gather(task(subtree_search, child(a), shares[a]) for a)  # nested tasks
        return warm + results                                              # sums

Seeds follow the tree (a child's seed is its parent's and its action), so on
the in-process `SyncEngine` the same seed gives the same search. Tasks are
retried when their worker dies, so a lost worker costs the sub-trees it ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hrl_tasks.planning.game import Game, State
from hrl_tasks.planning.mcts import SearchConfig, SearchResult, search


@dataclass(frozen=True)
class ParallelConfig:
    """How a search is split into tasks.

    Args:
        mode: ``"subtree"`` (children's sub-trees as nested tasks) or ``"root"``
            (independent trees, merged).
        split_min: A node splits only if its budget is at least this.
        max_depth: Levels of splitting at most (1: only the root splits).
        warmup: Share of a splitting node's budget searched before it splits.
        rounds: The rest of the budget is handed out in this many rounds, each
            divided by PUCT on the values the rounds before found (more rounds:
            closer to a serial search's adaptivity, more waits).
        trees: Independent trees, in root mode.
        retries: Times a sub-tree task is run again after its worker died.
    """

    mode: str = "subtree"
    split_min: int = 400
    max_depth: int = 2
    warmup: float = 0.0625
    rounds: int = 2
    trees: int = 2
    retries: int = 3

    def __post_init__(self):
        if self.mode not in ("subtree", "root"):
            raise ValueError(f"mode must be 'subtree' or 'root', got {self.mode!r}")


def parallel_search(
    game: Game,
    state: State,
    leaves: Any,
    config: SearchConfig,
    parallel: ParallelConfig,
    seed: int,
    weights: Any = None,
    *,
    engine=None,
) -> SearchResult:
    """One move's search on ``engine`` (default: the current engine).

    Args:
        game: The rules.
        state: The root.
        leaves: What evaluates leaves where a task runs (`NetworkLeaves`,
            `RolloutLeaves`).
        config: The search's settings; ``config.simulations`` is the whole budget.
        parallel: How it splits.
        seed: The root seed.
        weights: The network's weights for ``leaves`` (a TaskRef from
            ``engine.put`` travels once per worker; a dict is sent with each task).
        engine: Where the tasks run.

    Returns:
        The root's statistics, as `search` returns them.
    """
    from hrl_tasks.scheduler import current_engine

    engine = engine or current_engine()
    if parallel.mode == "root":
        budgets = split_evenly(config.simulations, parallel.trees)
        refs = [
            engine.submit(
                root_tree,
                game,
                state,
                leaves,
                weights,
                config,
                n,
                child_seed(seed, i),
                name="search-tree",
                retries=parallel.retries,
            )
            for i, n in enumerate(budgets)
        ]
        return merge_roots(engine.gather(refs), game)
    return subtree_search(
        game, state, leaves, weights, config, parallel, config.simulations, seed, 0, engine=engine
    )


def subtree_search(
    game: Game,
    state: State,
    leaves: Any,
    weights: Any,
    config: SearchConfig,
    parallel: ParallelConfig,
    budget: int,
    seed: int,
    depth: int,
    engine=None,
) -> SearchResult:
    """Searches ``state`` with ``budget`` simulations, splitting into nested tasks on
    ``engine`` (default: the current engine, which in a task is the nested one)."""
    rng = np.random.default_rng(seed)
    evaluate = leaves.resolve(game, rng, weights)
    if budget < parallel.split_min or depth >= parallel.max_depth or game.is_terminal(state):
        return search(game, state, evaluate, config, rng, simulations=budget, root_noise=depth == 0)
    warm_budget = max(int(budget * parallel.warmup), int(game.legal_mask(state).sum()) + 1)
    warm = search(
        game, state, evaluate, config, rng, simulations=warm_budget, root_noise=depth == 0
    )
    from hrl_tasks.scheduler import current_engine

    engine = engine or current_engine()
    if isinstance(weights, dict):
        weights = engine.put(weights)  # once for all the children, not once per task
    current = warm
    for budget_of_round in split_evenly(budget - warm.simulations, parallel.rounds):
        shares = allocate(current, budget_of_round, config)
        refs = {
            int(a): engine.submit(
                subtree_search,
                game,
                game.step(state, int(a)),
                leaves,
                weights,
                config,
                parallel,
                int(n),
                child_seed(seed, int(a) + game.num_actions * current.simulations),
                depth + 1,
                name=f"search-subtree-d{depth + 1}",
                retries=parallel.retries,
            )
            for a, n in enumerate(shares)
            if n > 0
        }
        results = dict(zip(refs, engine.gather(list(refs.values())), strict=True))
        current = merge_children(current, results, warm.to_play)
    return current


def root_tree(game, state, leaves, weights, config, budget, seed) -> SearchResult:
    """One independent tree of root mode."""
    rng = np.random.default_rng(seed)
    return search(game, state, leaves.resolve(game, rng, weights), config, rng, simulations=budget)


def allocate(warm: SearchResult, budget: int, config: SearchConfig) -> np.ndarray:
    """Divides ``budget`` simulations among the root's actions as PUCT would choose
    them one after another if each action's value stayed at its warm-up mean.

    In plain floats over the legal actions (a handful): the same choices, in the
    same arithmetic, as numpy over every action, which took 12 ms of the driver's
    time per move (before the children can start) at 800 simulations."""
    q = warm.q
    if warm.bounds is not None:
        q = warm.bounds.normalize(q)
    legal = [int(a) for a in np.flatnonzero(warm.legal)]
    visits = {a: float(warm.visits[a]) for a in legal}
    values = {a: float(q[a]) for a in legal}
    total = float(warm.visits.astype(float).sum())
    shares = np.zeros(len(warm.visits), dtype=int)
    uct = config.rule == "uct"
    prior = None if uct else {a: float(warm.prior[a]) for a in legal}
    for _ in range(budget):
        if uct:
            log_total = math.log(max(total, 1.0))
            scores = [
                values[a] + config.c_uct * math.sqrt(log_total / max(visits[a], 1e-9))
                for a in legal
            ]
        else:
            root = math.sqrt(max(total, 1.0))
            scores = [
                values[a] + config.c_puct * prior[a] * root / (1.0 + visits[a]) for a in legal
            ]
        action = legal[scores.index(max(scores))]  # the first of equals, as argmax
        visits[action] += 1.0
        total += 1.0
        shares[action] += 1
    return shares


def merge_children(
    warm: SearchResult, children: dict[int, SearchResult], to_play: int
) -> SearchResult:
    """The root after its warm-up plus its children's sub-tree results."""
    visits, value_sums = warm.visits.copy(), warm.value_sums.copy()
    total, done = warm.value_vector_sum.copy(), warm.simulations
    batch_sizes = list(warm.batch_sizes)
    for action, child in children.items():
        visits[action] += child.simulations
        value_sums[action] += child.value_vector_sum[to_play]
        total += child.value_vector_sum
        done += child.simulations
        batch_sizes += child.batch_sizes
    return SearchResult(
        visits,
        value_sums,
        total,
        done,
        batch_sizes,
        warm.prior,
        warm.legal,
        warm.to_play,
        warm.bounds,
    )


def merge_roots(results: list[SearchResult], game: Game) -> SearchResult:
    """Independent searches of one root, summed."""
    first = results[0]
    return SearchResult(
        sum(r.visits for r in results),
        sum(r.value_sums for r in results),
        sum(r.value_vector_sum for r in results),
        sum(r.simulations for r in results),
        [b for r in results for b in r.batch_sizes],
        first.prior,
        first.legal,
        first.to_play,
        first.bounds,
    )


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def child_seed(seed: int, index: int) -> int:
    """A seed for child ``index`` of the node seeded ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0] >> 1)
