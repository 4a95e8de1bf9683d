"""AlphaZero's flat config: self-play, search, network, learner and evaluation keys."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError, check_schedule


@dataclass
class AlphaZeroConfig(AlgorithmConfig):
    """Every key of AlphaZero. ``num_workers`` counts the cluster's worker processes
    (self-play games and sub-tree searches run there as tasks); the rollout keys of
    the other algorithms are not used."""

    samples_with_rollout_workers: ClassVar[bool] = False

    env: str = "tictactoe_v3"
    games_per_iteration: int = 8
    """Self-play games per iteration, run at once as tasks."""
    simulations: int = 100
    """Search simulations per self-play move."""
    search_rule: str = "puct"
    """puct (AlphaZero) or gumbel (Gumbel AlphaZero: sequential halving at the root, the
    policy learned from completed Q-values; useful with few simulations, 8-32)."""
    gumbel_actions: int = 16
    """Gumbel: the most root actions sequential halving compares."""
    full_search_fraction: float = 1.0
    """Playout-cap randomization (KataGo): the share of self-play moves searched in full
    (``simulations``, root noise) and trained on; the others take ``fast_simulations``
    without noise and are not kept. 1.0: every move in full."""
    fast_simulations: int | None = None
    """Simulations of the moves not searched in full (default: simulations // 4, at least 2)."""
    evaluator_cache: int = 0
    """Positions each worker's network evaluator keeps answers for, per weights version
    (a transposition cache; 0: none)."""
    evaluation_simulations: int | None = None
    """Simulations per move in evaluation games and compute_single_action (default: simulations)."""
    c_puct: float = 1.5
    dirichlet_alpha: float = 1.0
    """Root noise concentration; about 10 / (typical legal moves): 1.0 for tic-tac-toe, 1.0-1.5 for Connect Four."""
    dirichlet_fraction: float = 0.25
    temperature_moves: int = 4
    """Self-play moves drawn in proportion to visit counts; later ones take the most visited."""
    search_batch_size: int = 8
    """Leaves per network call within one search (virtual loss in between)."""
    split_min: int = 0
    """Split a move's search into sub-tree tasks when its budget is at least this
    (0: never; each game's moves are searched in its own task)."""
    channels: int = 32
    blocks: int = 2
    lr: float = 2e-3
    lr_schedule: tuple[tuple[float, ...], ...] | None = None
    """The learning rate over self-play moves, RLlib's ``lr_schedule``: ``((moves, lr),
    ...)`` points with moves rising, linear in between and held beyond the last, e.g.
    ``((0, 2e-3), (200_000, 2e-3), (350_000, 2e-4))``. None: ``lr`` throughout."""
    weight_decay: float = 1e-4
    train_batch_size: int = 256
    updates_per_iteration: int = 40
    """Gradient steps per iteration."""
    value_target_search: float = 0.0
    """Weight w of the search's value in the value target, ``(1 - w) z + w q``: the game's
    outcome z alone is AlphaZero's (0); the search's mean value q of the position is
    less noisy in early games where the outcome hangs on later blunders."""
    buffer_size: int = 50_000
    """Positions kept for training (each position with its symmetries)."""
    min_buffer_size: int = 500
    """Positions collected before the first gradient step."""
    evaluation_interval: int = 2
    """Iterations between evaluations against the opponents (0: never)."""
    evaluation_games: int = 20
    """Games per opponent and evaluation, half of them moving first."""
    opponents: tuple[str, ...] | None = None
    """Evaluation opponents: random, minimax (tic-tac-toe only), alphabeta-N (Connect
    Four, depth N), uct-N (UCT-MCTS with N random-rollout simulations). None: the
    game's own, random and minimax for tic-tac-toe, random and alphabeta-2 for Connect Four."""
    evaluation_time_s: float = 120.0
    """Seconds an evaluation game may take; a game still on then gives up at its next
    move and is not counted (``evaluation_games/<opponent>`` says how many were)."""
    threads_per_worker: int = 1
    """Threads of each worker process of the embedded cluster."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "games_per_iteration": ">= 1",
        "simulations": ">= 2",
        "gumbel_actions": ">= 1",
        "full_search_fraction": "(0, 1]",
        "fast_simulations": ">= 2",
        "evaluator_cache": ">= 0",
        "evaluation_simulations": ">= 1",
        "c_puct": "> 0",
        "dirichlet_alpha": "> 0",
        "dirichlet_fraction": "[0, 1]",
        "temperature_moves": ">= 0",
        "search_batch_size": ">= 1",
        "split_min": ">= 0",
        "channels": ">= 1",
        "blocks": ">= 0",
        "lr": "> 0",
        "lr_schedule": ">= 0",  # moves and rates; check_schedule wants each rate > 0
        "weight_decay": ">= 0",
        "train_batch_size": ">= 1",
        "updates_per_iteration": ">= 0",
        "value_target_search": "[0, 1]",
        "buffer_size": ">= 1",
        "min_buffer_size": ">= 1",
        "evaluation_interval": ">= 0",
        "evaluation_games": ">= 2",
        "evaluation_time_s": "> 0",
        "threads_per_worker": ">= 1",
    }

    def embedded_cluster(self) -> dict[str, int]:
        """Pure; see `AlgorithmConfig.embedded_cluster`: ``threads_per_worker`` threads
        in each worker process."""
        return {**super().embedded_cluster(), "threads_per_worker": self.threads_per_worker}

    def check(self) -> None:
        super().check()
        from hrl_tasks.planning.games import make_game
        from hrl_tasks.planning.opponents import check_opponent

        if self.search_rule not in ("puct", "gumbel"):
            raise ConfigError(
                f"AlphaZeroConfig.search_rule must be 'puct' or 'gumbel', got {self.search_rule!r}"
            )
        if self.num_learners > 1:
            raise ConfigError(
                "AlphaZeroConfig.num_learners must be 0 or 1: AlphaZero learns in the driver "
                "or in one learner worker (its batch normalization takes the statistics of the "
                f"whole batch, which shares of it would not give), got {self.num_learners}"
            )
        if self.search_rule == "gumbel" and self.split_min > 0:
            raise ConfigError(
                "AlphaZeroConfig.search_rule='gumbel' searches each move in one task: "
                f"split_min must be 0 with it, got {self.split_min}"
            )
        if self.lr_schedule is not None:
            check_schedule(type(self).__name__, "lr_schedule", self.lr_schedule)
        if not isinstance(self.env, str):
            return  # a creator function: its game is known once it is built
        try:
            game = make_game(self.env)
        except ValueError:
            return  # the algorithm says which games it plays when it is built
        for name in self.evaluation_opponents(game):
            try:
                check_opponent(name, game)
            except ValueError as exc:
                raise ConfigError(f"AlphaZeroConfig.opponents: {exc}") from None

    def evaluation_opponents(self, game) -> tuple[str, ...]:
        """The opponents to evaluate against: ``opponents``, or the game's own."""
        return tuple(self.opponents) if self.opponents is not None else game.opponents
