"""Monte Carlo tree search: PUCT (AlphaZero), Gumbel AlphaZero, and UCT with random rollouts.

The search is pure: a game, a state and an evaluator in, visit counts out.
Parallelism is how sub-trees are handed to tasks (`hrl_tasks.planning.parallel`),
never inside this arithmetic.

Leaves are evaluated in batches: a simulation descends with a virtual loss on
every edge it takes, so the next one in the same batch tends to go elsewhere,
and the batch's leaves go to the evaluator in one call (one forward pass of a
network). With ``batch_size=1`` this is the textbook sequential search.

Values are kept from each player's own view: an edge's ``W`` sums the value,
for the player to move at its node, of every simulation through it. Two-player
games use values in [-1, 1]; single-player models (returns of any scale) are
compared after min-max normalisation over the tree (as MuZero does).

    result = search(game, state, RolloutEvaluator(game), SearchConfig(simulations=200), rng)
    action = result.choose(temperature=0.0, rng=rng)
    target = result.policy_target  # what a network learns from

With ``rule="gumbel"`` the root compares Gumbel-sampled actions by sequential
halving and the search itself picks the move (`hrl_tasks.planning.gumbel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hrl_tasks.planning import gumbel
from hrl_tasks.planning.game import Game, State

Evaluate = Callable[[Sequence[State]], tuple[np.ndarray, np.ndarray]]
"""Leaf states -> (priors (B, num_actions), values (B,) for each state's player to move)."""


@dataclass(frozen=True)
class SearchConfig:
    """How one search runs.

    Args:
        simulations: Leaf evaluations (or terminal visits) per search, the
            root's own evaluation included.
        rule: ``"puct"`` (AlphaZero: priors guide the search), ``"gumbel"``
            (Gumbel AlphaZero: sequential halving over Gumbel-sampled root
            actions, the improved policy below; the search picks the move and
            learns from completed Q-values) or ``"uct"`` (UCB1 on visit counts;
            priors ignored).
        c_puct: PUCT's exploration weight.
        c_uct: UCB1's exploration weight.
        dirichlet_alpha: Concentration of the noise mixed into the root's priors.
        dirichlet_fraction: Weight of that noise; 0 turns it off (evaluation play).
        batch_size: Leaves collected (with virtual loss) before one evaluation call.
        virtual_loss: Visits, each counted as a loss, put on a pending edge.
        gumbel_actions: Gumbel: the most root actions sequential halving compares.
        c_visit: Gumbel: ``sigma(q) = (c_visit + max visits) * c_scale * q``.
        c_scale: Gumbel: as above.
    """

    simulations: int = 800
    rule: str = "puct"
    c_puct: float = 1.25
    c_uct: float = 1.4
    dirichlet_alpha: float = 0.3
    dirichlet_fraction: float = 0.25
    batch_size: int = 8
    virtual_loss: float = 1.0
    gumbel_actions: int = 16
    c_visit: float = 50.0
    c_scale: float = 0.1

    RULES = ("puct", "gumbel", "uct")

    def __post_init__(self):
        if self.rule not in self.RULES:
            raise ValueError(f"rule must be one of {self.RULES}, got {self.rule!r}")
        if self.gumbel_actions < 1:
            raise ValueError(f"gumbel_actions must be at least 1, got {self.gumbel_actions}")
        if self.simulations < 1 or self.batch_size < 1:
            raise ValueError(
                f"simulations and batch_size must be at least 1, got {self.simulations} "
                f"and {self.batch_size}"
            )


@dataclass
class SearchResult:
    """What a search found at its root.

    ``visits[a]`` and ``value_sums[a]`` are the root's edge statistics (values
    from the root mover's view); ``value_vector_sum`` sums every simulation's
    value vector (one entry per player), which is what the edge leading to
    this root would have collected: a parent merges sub-tree results with it.
    """

    visits: np.ndarray
    value_sums: np.ndarray
    value_vector_sum: np.ndarray
    simulations: int
    batch_sizes: list[int] = field(default_factory=list)
    prior: np.ndarray | None = None  # the root's priors (after noise)
    legal: np.ndarray | None = None
    to_play: int = 0
    bounds: MinMax | None = None  # single-player value range seen
    action: int | None = None  # the search's own pick (Gumbel), else None
    improved_policy: np.ndarray | None = None  # Gumbel's policy target, else None

    @property
    def policy_target(self) -> np.ndarray:
        """What the network learns from: Gumbel's improved policy, else the visit counts
        normalised."""
        if self.improved_policy is not None:
            return self.improved_policy
        return visit_policy(self.visits)

    def choose(self, temperature: float, rng: np.random.Generator) -> int:
        """The move: the search's own pick where it made one (Gumbel: its Gumbel noise
        is the exploration, so ``temperature`` is not used), else `select_action`."""
        if self.action is not None:
            return self.action
        return select_action(self.visits, temperature, rng)

    @property
    def q(self) -> np.ndarray:
        """Mean value of each root action for the root's mover (0 where unvisited)."""
        return np.divide(
            self.value_sums, self.visits, out=np.zeros_like(self.value_sums), where=self.visits > 0
        )


class Node:
    """A state in the tree with the statistics of its outgoing edges."""

    __slots__ = (
        "state",
        "to_play",
        "mask",
        "prior",
        "visits",
        "value_sums",
        "children",
        "expanded",
        "terminal",
        "value",
    )

    def __init__(self, game: Game, state: State):
        self.state = state
        self.terminal = game.is_terminal(state)
        self.to_play = game.to_play(state)
        self.mask = game.legal_mask(state)
        n = game.num_actions
        self.prior = np.zeros(n)
        self.visits = np.zeros(n)
        self.value_sums = np.zeros(n)
        self.children: dict[int, Node] = {}
        self.expanded = False
        self.value = 0.0  # the evaluator's value of this state, for its mover

    def expand(self, prior: np.ndarray, value: float = 0.0) -> None:
        prior = np.where(self.mask, prior, 0.0)
        total = prior.sum()
        self.prior = prior / total if total > 0 else self.mask / self.mask.sum()
        self.value = value
        self.expanded = True

    def gumbel_terms(self, config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
        """Gumbel's view of this node: its logits and ``sigma(completed Q)``."""
        completed = gumbel.completed_q(
            self.value, self.prior, self.visits, self.value_sums, self.mask
        )
        transformed = gumbel.sigma(completed, self.visits, config.c_visit, config.c_scale)
        return gumbel.logits_of(self.prior, self.mask), transformed

    def child(self, game: Game, action: int) -> Node:
        node = self.children.get(action)
        if node is None:
            node = self.children[action] = Node(game, game.step(self.state, action))
        return node


class MinMax:
    """Running bounds of the values seen, to put single-player values in [0, 1]."""

    def __init__(self):
        self.low, self.high = math.inf, -math.inf

    def update(self, value: float) -> None:
        self.low, self.high = min(self.low, value), max(self.high, value)

    def normalize(self, values: np.ndarray) -> np.ndarray:
        if self.high > self.low:
            return (values - self.low) / (self.high - self.low)
        return np.full_like(values, 0.5)


def value_vector(game: Game, player: int, value: float) -> np.ndarray:
    """One value per player from ``player``'s: zero-sum for two players."""
    if game.num_players == 1:
        return np.array([value])
    vector = np.full(game.num_players, -value / (game.num_players - 1))
    vector[player] = value
    return vector


def select_edge(node: Node, config: SearchConfig, bounds: MinMax | None) -> int:
    """The action a simulation takes at ``node`` (PUCT, Gumbel's interior rule, or UCB1)."""
    if config.rule == "gumbel":
        logits, transformed = node.gumbel_terms(config)
        policy = gumbel.improved_policy(logits, transformed, node.mask)
        return gumbel.interior_action(policy, node.visits, node.mask)
    visits = node.visits
    q = np.divide(node.value_sums, visits, out=np.zeros_like(visits), where=visits > 0)
    total = visits.sum()
    if bounds is not None:
        parent = node.value_sums.sum() / total if total > 0 else 0.0
        q = bounds.normalize(np.where(visits > 0, q, parent))
    if config.rule == "uct":
        unvisited = node.mask & (visits == 0)
        if unvisited.any():
            return int(np.flatnonzero(unvisited)[0])
        score = q + config.c_uct * np.sqrt(math.log(total) / np.maximum(visits, 1e-9))
    else:
        score = q + config.c_puct * node.prior * math.sqrt(max(total, 1.0)) / (1.0 + visits)
    return int(np.argmax(np.where(node.mask, score, -np.inf)))


def add_root_noise(node: Node, config: SearchConfig, rng: np.random.Generator) -> None:
    """Mixes Dirichlet noise into the root's priors over its legal actions."""
    if config.dirichlet_fraction <= 0 or config.rule != "puct":
        return
    legal = np.flatnonzero(node.mask)
    noise = rng.dirichlet([config.dirichlet_alpha] * len(legal))
    prior = node.prior.copy()
    prior[legal] = (1 - config.dirichlet_fraction) * prior[
        legal
    ] + config.dirichlet_fraction * noise
    node.prior = prior


def search(
    game: Game,
    state: State,
    evaluate: Evaluate,
    config: SearchConfig,
    rng: np.random.Generator,
    *,
    simulations: int | None = None,
    root_noise: bool = True,
) -> SearchResult:
    """Runs ``simulations`` (default ``config.simulations``) simulations from ``state``.

    Args:
        game: The rules.
        state: Where to search from; a terminal state returns at once.
        evaluate: Leaf states -> (priors, values), called with up to
            ``config.batch_size`` states at a time.
        config: The search's settings.
        rng: For the root noise; the same generator state gives the same search.
        simulations: Overrides ``config.simulations`` (sub-tree budgets).
        root_noise: Whether to mix Dirichlet noise into the root's priors.

    Returns:
        The root's statistics.
    """
    budget = config.simulations if simulations is None else simulations
    root = Node(game, state)
    bounds = MinMax() if game.num_players == 1 else None
    total = np.zeros(game.num_players)
    batch_sizes: list[int] = []
    if root.terminal:
        returns = np.asarray(game.returns(state), dtype=float)
        return SearchResult(
            root.visits,
            root.value_sums,
            returns * budget,
            budget,
            legal=root.mask,
            to_play=root.to_play,
        )
    priors, values = evaluate([state])
    batch_sizes.append(1)
    root.expand(priors[0], float(values[0]))
    if root_noise:
        add_root_noise(root, config, rng)
    halving = SequentialHalving(root, config, budget, rng, root_noise)
    total += value_vector(game, root.to_play, float(values[0]))
    done = 1
    while done < budget:
        pending: list[tuple[list[tuple[Node, int]], Node]] = []
        waiting: set[int] = set()
        while done + len(pending) < budget and len(pending) < config.batch_size:
            path, leaf = descend(game, root, config, bounds, halving)
            if leaf.terminal:
                vector = np.asarray(game.returns(leaf.state), dtype=float)
                backup(path, vector, 0.0, bounds)
                total += vector
                done += 1
                continue
            if id(leaf) in waiting:  # a collision: its evaluation is already pending
                break
            apply_virtual_loss(path, config.virtual_loss)
            waiting.add(id(leaf))
            pending.append((path, leaf))
        if not pending:
            continue
        priors, values = evaluate([leaf.state for _, leaf in pending])
        batch_sizes.append(len(pending))
        for (path, leaf), prior, value in zip(pending, priors, values, strict=True):
            leaf.expand(prior, float(value))
            vector = value_vector(game, leaf.to_play, float(value))
            backup(path, vector, config.virtual_loss, bounds)
            total += vector
        done += len(pending)
    action, improved = halving.finish(root) if halving.active else (None, None)
    return SearchResult(
        root.visits,
        root.value_sums,
        total,
        done,
        batch_sizes,
        root.prior,
        root.mask,
        root.to_play,
        bounds,
        action,
        improved,
    )


class SequentialHalving:
    """The root of a Gumbel search: its Gumbel noise, drawn once (zeros without root
    noise: evaluation play), and the visits each simulation's root action should have.
    Inactive (``active`` False) for the other rules."""

    def __init__(
        self, root: Node, config: SearchConfig, budget: int, rng: np.random.Generator, noise: bool
    ):
        self.active = config.rule == "gumbel"
        self.config = config
        if not self.active:
            return
        size = len(root.mask)
        self.gumbel = rng.gumbel(size=size) if noise else np.zeros(size)
        considered = min(config.gumbel_actions, int(root.mask.sum()))
        self.schedule = gumbel.considered_visits(considered, max(1, budget - 1))

    def select(self, root: Node) -> int:
        """The root action of the next simulation (virtual visits of a batch count)."""
        index = min(int(round(root.visits.sum())), len(self.schedule) - 1)
        logits, transformed = root.gumbel_terms(self.config)
        return gumbel.root_action(
            self.gumbel, logits, transformed, root.visits, self.schedule[index], root.mask
        )

    def finish(self, root: Node) -> tuple[int, np.ndarray]:
        """The move (the best of the last round's actions) and the improved policy target."""
        logits, transformed = root.gumbel_terms(self.config)
        action = gumbel.final_action(self.gumbel, logits, transformed, root.visits, root.mask)
        return action, gumbel.improved_policy(logits, transformed, root.mask)


def descend(
    game: Game,
    root: Node,
    config: SearchConfig,
    bounds: MinMax | None,
    halving: SequentialHalving | None = None,
) -> tuple[list[tuple[Node, int]], Node]:
    """Follows the selection rule from the root to an unexpanded or terminal node
    (the root's own rule from ``halving`` where it is active)."""
    path, node = [], root
    while node.expanded and not node.terminal:
        if node is root and halving is not None and halving.active:
            action = halving.select(root)
        else:
            action = select_edge(node, config, bounds)
        path.append((node, action))
        node = node.child(game, action)
    return path, node


def apply_virtual_loss(path: list[tuple[Node, int]], loss: float) -> None:
    for node, action in path:
        node.visits[action] += loss
        node.value_sums[action] -= loss


def backup(
    path: list[tuple[Node, int]], vector: np.ndarray, loss: float, bounds: MinMax | None
) -> None:
    """Adds one simulation's value along ``path``, removing ``loss`` virtual visits."""
    for node, action in path:
        node.visits[action] -= loss
        node.value_sums[action] += loss
        node.visits[action] += 1
        node.value_sums[action] += vector[node.to_play]
        if bounds is not None:
            bounds.update(node.value_sums[action] / node.visits[action])


def select_action(visits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """An action from root visit counts: the most visited (ties at random) at
    temperature 0, else drawn with probability proportional to ``visits ** (1 / T)``."""
    if temperature <= 0:
        best = np.flatnonzero(visits == visits.max())
        return int(rng.choice(best))
    weights = visits ** (1.0 / temperature)
    return int(rng.choice(len(visits), p=weights / weights.sum()))


def visit_policy(visits: np.ndarray) -> np.ndarray:
    """The search policy a network learns from: visit counts normalised."""
    return visits / visits.sum()


# --- evaluators ------------------------------------------------------------------


class RolloutEvaluator:
    """UCT's classic leaf value: one game played to the end with random moves.

    Priors are uniform over legal actions (UCT does not use them).
    """

    def __init__(self, game: Game, rng: np.random.Generator, rollouts: int = 1):
        self.game = game
        self.rng = rng
        self.rollouts = rollouts

    def __call__(self, states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        game = self.game
        priors = np.array([game.legal_mask(s) for s in states], dtype=float)
        values = np.array([self.value(s) for s in states])
        return priors, values

    def value(self, state: State) -> float:
        game, player = self.game, self.game.to_play(state)
        total = 0.0
        for _ in range(self.rollouts):
            current = state
            while not game.is_terminal(current):
                legal = np.flatnonzero(game.legal_mask(current))
                current = game.step(current, int(legal[self.rng.integers(len(legal))]))
            total += float(game.returns(current)[player])
        return total / self.rollouts


class NetworkEvaluator:
    """Leaf values and priors from a network: ``predict(observations, masks) ->
    (logits, values)`` on a batch; illegal actions get zero prior."""

    def __init__(self, game: Game, predict: Callable[[np.ndarray, np.ndarray], tuple]):
        self.game = game
        self.predict = predict

    def __call__(self, states: Sequence[State]) -> tuple[np.ndarray, np.ndarray]:
        game = self.game
        observations = np.stack([game.observation(s) for s in states]).astype(np.float32)
        masks = np.stack([game.legal_mask(s) for s in states])
        logits, values = self.predict(observations, masks)
        return masked_softmax(np.asarray(logits, dtype=float), masks), np.asarray(values)


def masked_softmax(logits: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Softmax over each row's legal entries; illegal ones get 0."""
    logits = np.where(masks, logits, -np.inf)
    logits = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=-1, keepdims=True)


# --- a searching player ------------------------------------------------------------


class SearchPlayer:
    """A player that searches before each move (an opponent, or a trained agent).

    ``UCT-MCTS with N random-rollout simulations`` is
    ``SearchPlayer(SearchConfig(simulations=N, rule="uct", batch_size=1))``.

    Args:
        config: The search's settings.
        make_evaluator: ``(game, rng) -> Evaluate``; default random rollouts.
        temperature: 0 plays the most visited move.
        name: How results name it; default e.g. ``"uct-1000"``.
    """

    def __init__(
        self,
        config: SearchConfig,
        make_evaluator: Callable[[Game, np.random.Generator], Evaluate] | None = None,
        temperature: float = 0.0,
        name: str | None = None,
    ):
        self.config = config
        self.make_evaluator = make_evaluator or (lambda game, rng: RolloutEvaluator(game, rng))
        self.temperature = temperature
        self.name = name or f"{config.rule}-{config.simulations}"

    def act(self, game: Game, state: State, rng: np.random.Generator) -> int:
        evaluate = self.make_evaluator(game, rng)
        result = search(game, state, evaluate, self.config, rng, root_noise=False)
        return select_action(result.visits, self.temperature, rng)


def uct_player(simulations: int) -> SearchPlayer:
    """The classic baseline: UCT with one random rollout per leaf."""
    return SearchPlayer(SearchConfig(simulations=simulations, rule="uct", batch_size=1))
