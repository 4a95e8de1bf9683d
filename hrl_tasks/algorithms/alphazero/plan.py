"""AlphaZero (Silver et al. 2018) on a Dask cluster: self-play games as tasks, each move a
(possibly nested) tree search, a replay buffer and a learner in the driver.

One iteration, as the plan reads::

    weights   = engine.put(network weights)                 # once per iteration
    games     = [task(self_play_game, weights, seed) ...]   # games_per_iteration, at once
    matches   = [task(evaluation_game, opponent, side) ...] # every evaluation_interval
    (the next iteration's games are submitted before learning, with these weights)
    buffer   += positions of the finished games (and their symmetries)
    learner  : updates_per_iteration minibatch steps on the buffer
    report   : losses, games, simulations/s, win_rate/<opponent>

Self-play is one iteration behind the learner, as in asynchronous AlphaZero
implementations, so the workers play while the driver learns. The learner is a
`PolicyValuePolicy`: in the driver, or with ``num_learners=1`` in a `Learner`
worker process of its own (`LearnerGroup`), which leaves the driver's core to the
driver; the driver keeps the buffer and sends each minibatch. The replay buffer is
not in checkpoints: a resumed run refills it from new games.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from typing import Any

import numpy as np

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.alphazero.config import AlphaZeroConfig
from hrl_tasks.algorithms.alphazero.selfplay import evaluation_game, self_play_game
from hrl_tasks.data import SampleBatch
from hrl_tasks.data.replay import ReplayBuffer
from hrl_tasks.data.rng import generator_from_state, generator_state
from hrl_tasks.planning.evaluator import NetworkLeaves
from hrl_tasks.planning.games import make_game
from hrl_tasks.planning.mcts import NetworkEvaluator, SearchConfig, search
from hrl_tasks.planning.parallel import ParallelConfig
from hrl_tasks.planning.symmetry import symmetries
from hrl_tasks.policies.policy_value import PolicyValueConfig, PolicyValuePolicy
from hrl_tasks.rollout.learner_group import LearnerGroup
from hrl_tasks.scheduler import Engine

STOP_WAIT_S = 30.0  # for self-play games in flight at stop()


def value_target(record: dict[str, Any], search_weight: float) -> np.ndarray:
    """What the value head learns for a game's positions: the outcome ``z``, or with
    ``search_weight`` w, ``(1 - w) z + w q`` with ``q`` the search's value. Pure."""
    if search_weight == 0:
        return record["value"]
    return ((1 - search_weight) * record["value"] + search_weight * record["search_value"]).astype(
        np.float32
    )


def scheduled_lr(schedule: tuple | None, lr: float, moves: int) -> float:
    """The learning rate after ``moves`` of self-play: ``lr`` without a schedule, else
    linear between the schedule's ``(moves, lr)`` points and held beyond its ends. Pure."""
    if not schedule:
        return lr
    points, rates = zip(*schedule, strict=True)
    return float(np.interp(moves, points, rates))


class AlphaZero(Algorithm):
    """AlphaZero for PettingZoo's turn-based classic games (``tictactoe_v3``,
    ``connect_four_v3``). Reports ``win_rate/<opponent>`` (and ``score/`` and
    ``loss_rate/``) from its evaluations; ``episode_return_mean`` means nothing in
    self-play and is not reported.
    """

    name = "alphazero"
    config_class = AlphaZeroConfig
    learner_group = True  # in one learner worker (num_learners=1; AlphaZeroConfig.check)
    policy_noun = "network"
    policy_mismatch_hint = "saved with other channels, blocks or game?"

    def __init__(self, config=None, engine=None, **overrides):
        self.config = self.parse_config(config, overrides)
        self._build_learner()
        self.owns_engine = engine is None
        self.engine = engine or Engine.local(**self.config.embedded_cluster())
        self.workers, self.plan = None, None  # no rollout workers: games are tasks
        self.buffer = ReplayBuffer(self.config.buffer_size, seed=self.config.seed)
        self.pending: list = []
        self.last_evaluation: dict[str, float] = {}
        self.learners = None
        if self.config.num_learners:
            try:
                self.learners = LearnerGroup(
                    self.engine,
                    self.learner,
                    self.config.num_learners,
                    resources=self.config.learner_resources or {"CPU": 1},
                    max_restarts=self.config.max_restarts,
                    num_threads=self.config.learner_threads,
                )
            except BaseException:
                if self.owns_engine:
                    self.engine.close()
                raise

    def _build_learner(self) -> None:
        cfg = self.config
        self.learners = None  # a LearnerGroup, with num_learners=1
        self.game = make_game(cfg.env if isinstance(cfg.env, str) else cfg.env())
        self.learner = PolicyValuePolicy(
            config=PolicyValueConfig(
                observation_shape=tuple(self.game.observation_shape),
                num_actions=self.game.num_actions,
                channels=cfg.channels,
                blocks=cfg.blocks,
                lr=cfg.lr,
                weight_decay=cfg.weight_decay,
                seed=cfg.seed,
            )
        )
        self.spec = self.learner.config.spec
        self.net = self.learner.model
        seed = secrets.randbits(62) if cfg.seed is None else cfg.seed
        self.rng = np.random.default_rng(seed)
        self.counters: Counter[str] = Counter()
        self.iteration, self.time_total_s = 0, 0.0
        self.search_config = SearchConfig(
            simulations=cfg.simulations,
            rule=cfg.search_rule,
            c_puct=cfg.c_puct,
            dirichlet_alpha=cfg.dirichlet_alpha,
            dirichlet_fraction=cfg.dirichlet_fraction,
            batch_size=cfg.search_batch_size,
            gumbel_actions=cfg.gumbel_actions,
        )
        self.fast_config = None  # playout-cap randomization's cheap searches
        if cfg.full_search_fraction < 1.0:
            fast = cfg.fast_simulations or max(2, cfg.simulations // 4)
            self.fast_config = SearchConfig(
                **{**self.search_config.__dict__, "simulations": fast, "dirichlet_fraction": 0.0}
            )
        self.evaluation_config = SearchConfig(
            simulations=cfg.evaluation_simulations or cfg.simulations,
            rule=cfg.search_rule,
            c_puct=cfg.c_puct,
            dirichlet_fraction=0.0,
            batch_size=cfg.search_batch_size,
            gumbel_actions=cfg.gumbel_actions,
        )
        self.parallel = ParallelConfig(split_min=cfg.split_min) if cfg.split_min > 0 else None

    def build_for_acting(self) -> None:
        self._build_learner()

    @property
    def policy(self):
        return self.net

    def build_plan(self, workers, ctx):  # the iteration is `train` itself
        raise NotImplementedError

    # --- one iteration ----------------------------------------------------------------

    def train(self) -> dict:
        self.check_can_train()
        start = time.perf_counter()
        cfg = self.config
        version = self.counters["updates"]
        leaves = NetworkLeaves(self.spec, version, cfg.evaluator_cache)
        weights = self.engine.put(self.net.get_weights())
        games = self.pending or self.submit_games(leaves, weights)
        evaluate = cfg.evaluation_interval and (self.iteration + 1) % cfg.evaluation_interval == 0
        matches = self.submit_matches(leaves, weights) if evaluate else {}
        finished = self.engine.gather(games)
        self.pending = self.submit_games(leaves, weights)  # played while the learner learns
        for record in finished:
            self.store(record)
        losses = self.learn()
        if matches:
            self.last_evaluation = self.summarize_matches(matches)
            self.counters["evaluations"] += 1
        self.iteration += 1
        self.time_total_s += time.perf_counter() - start
        return self.metrics(finished, losses, time.perf_counter() - start)

    def submit_games(self, leaves, weights) -> list:
        cfg = self.config
        return [
            self.engine.submit(
                self_play_game,
                self.game,
                leaves,
                weights,
                self.search_config,
                self.parallel,
                cfg.temperature_moves,
                int(self.rng.integers(2**62)),
                self.fast_config,
                cfg.full_search_fraction,
                name="self-play",
                retries=3,
            )
            for _ in range(cfg.games_per_iteration)
        ]

    def submit_matches(self, leaves, weights) -> dict[str, list]:
        """Evaluation games per opponent, the agent moving first in half of them; a game
        still on ``evaluation_time_s`` after it began gives up."""
        cfg = self.config
        return {
            opponent: [
                self.engine.submit(
                    evaluation_game,
                    self.game,
                    leaves,
                    weights,
                    self.evaluation_config,
                    opponent,
                    k % 2,
                    int(self.rng.integers(2**62)),
                    cfg.evaluation_time_s,
                    name="evaluation",
                    retries=3,
                )
                for k in range(cfg.evaluation_games)
            ]
            for opponent in cfg.evaluation_opponents(self.game)
        }

    def summarize_matches(self, matches: dict[str, list]) -> dict[str, float]:
        summary = {}
        for opponent, refs in matches.items():
            played = [o for o in self.engine.gather(refs) if o is not None]  # None: gave up
            outcomes = np.asarray(played or [np.nan], dtype=np.float64)  # none: NaN rates
            summary[f"win_rate/{opponent}"] = float(np.mean(outcomes > 0)) if played else np.nan
            summary[f"loss_rate/{opponent}"] = float(np.mean(outcomes < 0)) if played else np.nan
            summary[f"score/{opponent}"] = float(np.mean((outcomes + 1) / 2))
            summary[f"evaluation_games/{opponent}"] = float(len(played))
        return summary

    def store(self, record: dict[str, Any]) -> None:
        """Adds a game's searched positions, and their symmetric copies, to the buffer."""
        if record["positions"]:
            obs, mask, policy = symmetries(
                self.game, record["obs"], record["mask"], record["policy"]
            )
            value = value_target(record, self.config.value_target_search)
            value = np.tile(value, len(obs) // len(value))
            self.buffer.add(
                SampleBatch({"obs": obs, "mask": mask, "policy": policy, "value": value})
            )
        self.counters["games"] += 1
        self.counters["positions"] += record["moves"]
        self.counters["trained_positions"] += record["positions"]
        self.counters["leaf_batches"] += sum(record["batch_sizes"].values())
        self.counters["leaves"] += sum(k * n for k, n in record["batch_sizes"].items())
        self.counters["simulations"] += record["simulations"]
        self.counters["search_s"] += record["search_s"]
        self.counters["first_player_wins"] += int(record["returns"][0] > 0)
        self.counters["draws"] += int(record["returns"][0] == 0)

    def learn(self) -> dict[str, float]:
        """``updates_per_iteration`` minibatch steps, in the driver or the learner worker
        (whose weights come back to the driver's network after them)."""
        cfg = self.config
        if len(self.buffer) < cfg.min_buffer_size:
            return {}
        learner = self.learners or self.learner
        if cfg.lr_schedule is not None:  # set every time: a reformed learner takes lr again
            lr = scheduled_lr(cfg.lr_schedule, cfg.lr, self.counters["positions"])
            if self.learners is not None:
                self.learners.queue("set_lr", lr)
            else:
                self.learner.set_lr(lr)
        totals: Counter[str] = Counter()
        for _ in range(cfg.updates_per_iteration):
            info = learner.learn_on_batch(self.buffer.sample(cfg.train_batch_size))
            totals.update({k: v for k, v in info.items() if k != "total"})
            self.counters["updates"] += 1
        if self.learners is not None:
            self.learners.pull_weights()
        n = max(1, cfg.updates_per_iteration)
        return {key: value / n for key, value in totals.items()}

    def metrics(self, finished: list[dict], losses: dict, seconds: float) -> dict:
        c = self.counters
        games = len(finished)
        return {
            "iteration": self.iteration,
            "time_total_s": self.time_total_s,
            "env_steps_sampled": c["positions"],
            "games": c["games"],
            "buffer_size": len(self.buffer),
            "updates": c["updates"],
            "lr": scheduled_lr(self.config.lr_schedule, self.config.lr, c["positions"]),
            "self_play_games_per_s": games / max(seconds, 1e-9),
            "simulations_per_s": c["simulations"] / max(c["search_s"], 1e-9),
            "positions_per_s": c["trained_positions"] / max(self.time_total_s, 1e-9),
            "leaf_batch_mean": c["leaves"] / max(1, c["leaf_batches"]),
            "game_length_mean": float(np.mean([r["moves"] for r in finished])),
            "first_player_win_rate": c["first_player_wins"] / max(1, c["games"]),
            "draw_rate": c["draws"] / max(1, c["games"]),
            "evaluations": c["evaluations"],
            **{f"info/{k}": v for k, v in losses.items()},
            **self.last_evaluation,
        }

    # --- acting -----------------------------------------------------------------------

    def compute_single_action(self, observation, explore: bool = False) -> int:
        """A legal action for the player to move, from PettingZoo's observation dict
        (``observation`` planes and ``action_mask``), by a search with the network
        (``evaluation_simulations``; with ``explore``, drawn in proportion to visits)."""
        state = self.game.state_from_observation(observation)
        if self.game.is_terminal(state):
            raise ValueError("the game in this observation is over: there is no move to make")
        evaluate = NetworkEvaluator(self.game, self.net.predict)
        result = search(
            self.game, state, evaluate, self.evaluation_config, self.rng, root_noise=False
        )
        return result.choose(1.0 if explore else 0.0, self.rng)

    def evaluate(self, episodes: int | None = None) -> dict:
        """Evaluation games now, against every opponent of the config."""
        leaves = NetworkLeaves(
            self.spec, ("evaluate", self.counters["updates"]), self.config.evaluator_cache
        )
        weights = self.engine.put(self.net.get_weights())
        return self.summarize_matches(self.submit_matches(leaves, weights))

    # --- checkpoints -------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        if self.learners is not None:
            self.learners.pull_state()
        return {
            **self.checkpoint_header(),
            "policy": self.learner.get_state(),  # weights, optimizer, rng, updates
            "flow": {"counters": dict(self.counters), "evaluation": self.last_evaluation},
            "rng": generator_state(self.rng),
        }

    def get_policy_state(self) -> dict[str, Any]:
        """The network's weights (the optimizer's state is loaded by `set_state` alone)."""
        return {"weights": self.net.get_weights()}

    def set_policy_state(self, policy_state: Any) -> None:
        self.net.set_weights(policy_state["weights"])

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_acting_state(state)
        saved = state["policy"]
        if saved.get("optimizer") is not None:  # a checkpoint saved before the policy had
            self.learner.set_state(
                {
                    "rng": self.learner.get_rng_state(),  # its own rng
                    "num_grad_updates": 0,
                    **saved,
                }
            )
        if self.learners is not None:
            self.learners.push_state()
        self.counters = Counter(state["flow"]["counters"])
        self.last_evaluation = dict(state["flow"].get("evaluation", {}))
        if "rng" in state:
            self.rng = generator_from_state(state["rng"])
        self.pending = []  # games in flight were played with the old weights

    @property
    def ctx(self):
        return _Counters(self.counters)

    def stop(self) -> None:
        """Waits (a little) for the games in flight, then closes an embedded cluster:
        a worker shut down mid-forward-pass aborts noisily."""
        if self.acting_only:
            return
        if self.pending:
            self.engine.wait(self.pending, timeout=STOP_WAIT_S)
        self.pending = []
        if self.learners is not None:
            self.learners.stop()
            self.learners = None
        if self.owns_engine:
            self.engine.close()


class _Counters:
    """What the command line reads of a run's progress (``ctx.counters``)."""

    def __init__(self, counters: Counter):
        self.counters = {"env_steps_sampled": counters["positions"]}
