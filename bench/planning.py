"""Parallel tree search against the same search run serially, measured in one run.

Simulations per second of one move's search (PUCT, a policy-value network,
leaves batched 8 at a time) on a fixed set of Connect Four positions, with 1, 2
and 4 engine workers, against the serial baseline: the same search code,
network and leaf batching in one process: the same `parallel_search`, split the
same way, its tasks run in turn on a `SyncEngine` (seeds follow the tree, so
both find the same visit counts: ``same_visits_as_serial``). Plain `search`
in one process is reported beside it. Each worker count gets its own
cluster; its timed passes alternate with serial passes (serial, parallel,
plain, serial, parallel, plain, ...) so that drift of the machine's speed hits
both, and its ratio is taken against those adjacent serial passes. Cluster
start-up and one warm-up pass (the network loads in every worker) are not
timed per move; they are reported.

Also reported: the leaf-batch sizes of the searches (``SearchResult.batch_sizes``)
and the rows and requests of each forward pass of the evaluator in every worker
process and in the driver (`BatchingEvaluator.stats`, counted over the timed
passes). With ``--games N``, the serial and the 2-worker searcher each play N
games against UCT-MCTS at the same budget (``--game-simulations``, default
1,000, no root noise), alternating who moves first; their win rates should
differ by at most 5 points. A random-init network plays weakly; pass an
AlphaZero checkpoint with ``--checkpoint`` for a meaningful comparison.

Target: at least 1.6x serial with 2 workers (2-core machine).

Sub-tree defaults (``--split-min 400 --max-depth 2 --warmup 0.0625``): from CPU
times of each node's own work measured on `SyncEngine` for these 20 positions
(random network), the critical path with 2 workers and no task overhead is
1/1.86 of serial, against 1/1.56 with the library's defaults (200, 1, 0.125):
in half of these positions the warm-up finds one child worth nearly the whole
budget (a win or a forced block), which with one level of splitting one worker
then searches alone. About 7 tasks per move either way; each costs the
driver's process (client and scheduler) about 5 ms of CPU on this machine,
taken from the same two cores as the workers.

    python bench/planning.py [--repeats 5] [--workers 1 2 4] [--games 200] [--checkpoint PATH]

Without games it takes a few minutes; ``--games 200`` adds about an hour (the
UCT opponent's rollouts run in the driver).
"""

import argparse
import contextvars
import json
import os
import platform
import statistics
import time
from collections import Counter

import numpy as np

import hrl_tasks as hrl
from hrl_tasks.planning.evaluator import NetworkLeaves
from hrl_tasks.planning.games import ConnectFour
from hrl_tasks.planning.mcts import SearchConfig, search, select_action, uct_player
from hrl_tasks.planning.opponents import play_match
from hrl_tasks.planning.parallel import ParallelConfig, parallel_search
from hrl_tasks.policies.policy_value import PolicyValueSpec

TARGET = 1.6


def fixed_positions(game, count, seed, min_plies=4, max_plies=14):
    """``count`` non-terminal positions after random legal moves; the same for a seed."""
    rng = np.random.default_rng(seed)
    positions = []
    while len(positions) < count:
        state = game.initial_state()
        for _ in range(int(rng.integers(min_plies, max_plies + 1))):
            state = game.step(state, int(rng.choice(np.flatnonzero(game.legal_mask(state)))))
            if game.is_terminal(state):
                break
        if not game.is_terminal(state):
            positions.append(state)
    return positions


def network(game, checkpoint, channels, blocks, seed):
    """``(spec, weights, description)``: a checkpoint's network or a seeded random one."""
    shape = tuple(game.observation_shape)
    if checkpoint:
        from hrl_tasks.algorithms.checkpoint import read_checkpoint

        state = read_checkpoint(checkpoint)
        config = state["config"]
        spec = PolicyValueSpec(shape, game.num_actions, config["channels"], config["blocks"])
        return spec, state["policy"]["weights"], f"checkpoint {checkpoint}"
    import torch

    torch.manual_seed(seed)
    spec = PolicyValueSpec(shape, game.num_actions, channels, blocks)
    return spec, spec.build().get_weights(), f"random init (torch seed {seed})"


class Searcher:
    """An engine with its own context, so that several can be open and each is
    ``current_engine()`` for the searches it runs (sub-tree tasks look it up)."""

    def __init__(self, make_engine, game, leaves, weights, parallel):
        self.context = contextvars.copy_context()
        self.engine = self.context.run(make_engine)
        self.game, self.leaves, self.parallel = game, leaves, parallel
        self.weights = weights if isinstance(self.engine, hrl.SyncEngine) else None
        if self.weights is None:  # travels once per worker
            self.weights = self.context.run(self.engine.put, weights)

    def search(self, state, config, seed):
        return self.context.run(
            parallel_search, self.game, state, self.leaves, config, self.parallel, seed,
            self.weights, engine=self.engine,
        )  # fmt: skip

    def plain_search(self, state, config, seed):
        """`search` itself, with no tasks (the serial engine only)."""

        def run():
            rng = np.random.default_rng(seed)
            evaluate = self.leaves.resolve(self.game, rng, self.weights)
            return search(self.game, state, evaluate, config, rng)

        return self.context.run(run)

    def evaluator_stats(self):
        """Forward passes by rows and by requests: ``{process: {"rows": {...}, ...}}``."""
        key = ("hrl_tasks.planning.evaluator", self.leaves.spec)
        stats = {}
        evaluator = self.engine.local_cache.get(key)
        if evaluator is not None:  # the driver's (a sub-tree search's warm-up runs there)
            stats["driver"] = evaluator.stats()
        if not isinstance(self.engine, hrl.SyncEngine):
            stats.update(self.engine.client.run(worker_evaluator_stats, key))
        return stats

    def close(self):
        self.context.run(self.engine.close)


def worker_evaluator_stats(key, dask_worker):
    """Run by ``client.run`` on every worker: its evaluator's histograms (not a task,
    so ``worker_local`` cannot be asked; its cache is read directly)."""
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    evaluator = WorkerRuntime.of(dask_worker).cache.get(key)
    return evaluator.stats() if evaluator is not None else {"rows": {}, "requests": {}}


class Pass:
    """Simulations, seconds and leaf batches of passes over the positions."""

    def __init__(self):
        self.simulations, self.seconds, self.driver_cpu = 0, 0.0, 0.0
        self.moves, self.move_seconds, self.batches = 0, [], Counter()
        self.visits = []  # each move's root visit counts

    def run(self, searcher_call, positions, config, seed):
        for i, state in enumerate(positions):
            cpu, start = time.process_time(), time.perf_counter()
            result = searcher_call(state, config, seed + i)
            elapsed = time.perf_counter() - start
            self.driver_cpu += time.process_time() - cpu
            self.simulations += result.simulations
            self.seconds += elapsed
            self.move_seconds.append(elapsed)
            self.batches.update(result.batch_sizes)
            self.visits.append(result.visits)
            self.moves += 1

    def add(self, other):
        self.simulations += other.simulations
        self.seconds += other.seconds
        self.driver_cpu += other.driver_cpu
        self.moves += other.moves
        self.move_seconds += other.move_seconds
        self.batches += other.batches
        self.visits += other.visits

    @property
    def rate(self):
        return self.simulations / self.seconds

    def summary(self):
        batches = sum(self.batches.values())
        return {
            "sims_per_s": round(self.rate, 1),
            "median_move_ms": round(statistics.median(self.move_seconds) * 1e3, 2),
            "driver_cpu_per_move_ms": round(self.driver_cpu / self.moves * 1e3, 2),
            "leaf_batches": dict(sorted(self.batches.items())),
            "mean_leaf_batch": round(sum(k * n for k, n in self.batches.items()) / batches, 2),
        }


def minus(after, before):
    """Histograms of ``after`` less those of ``before`` (per process, rows/requests)."""
    out = {}
    for process, stats in after.items():
        old = before.get(process, {})
        out[process] = {
            kind: {
                int(k): n - old.get(kind, {}).get(k, 0)
                for k, n in sorted(hist.items())
                if n - old.get(kind, {}).get(k, 0)
            }
            for kind, hist in stats.items()
        }
    return out


class SearchingPlayer:
    """A `Player` that searches each move with a `Searcher` (the most visited move)."""

    def __init__(self, searcher, config, name):
        self.searcher, self.config, self.name = searcher, config, name

    def act(self, game, state, rng):
        result = self.searcher.search(state, self.config, int(rng.integers(2**62)))
        return select_action(result.visits, 0.0, rng)


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--positions", type=int, default=20, help="fixed positions searched")
    parser.add_argument("--simulations", type=int, default=800, help="simulations per move")
    parser.add_argument("--batch-size", type=int, default=8, help="leaves per network call")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per worker count")
    parser.add_argument("--mode", choices=("subtree", "root"), default="subtree")
    # Sub-tree defaults: the shortest critical path found for these positions (see the
    # module docstring).
    parser.add_argument("--split-min", type=int, default=400, help="sub-tree mode")
    parser.add_argument("--max-depth", type=int, default=2, help="sub-tree mode")
    parser.add_argument("--warmup", type=float, default=0.0625, help="sub-tree mode")
    parser.add_argument("--trees", type=int, default=0, help="root mode (0: the workers)")
    parser.add_argument("--channels", type=int, default=32, help="random-init network")
    parser.add_argument("--blocks", type=int, default=2, help="random-init network")
    parser.add_argument("--checkpoint", help="an AlphaZero Connect Four checkpoint")
    parser.add_argument(
        "--games", type=int, default=0, help="games vs UCT per searcher (needs 2 in --workers)"
    )
    parser.add_argument("--game-simulations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


class Bench:
    """The fixed inputs of a run, and the serial searcher every measurement is held against."""

    def __init__(self, args):
        self.args = args
        self.game = ConnectFour()
        self.positions = fixed_positions(self.game, args.positions, args.seed)
        self.spec, self.weights, self.network = network(
            self.game, args.checkpoint, args.channels, args.blocks, args.seed
        )
        self.leaves = NetworkLeaves(self.spec, version="bench")
        self.config = SearchConfig(simulations=args.simulations, batch_size=args.batch_size)
        self.serial_all, self.plain, self.startup = Pass(), Pass(), {}

    def parallel_config(self, workers):
        args = self.args
        return ParallelConfig(
            mode=args.mode, split_min=args.split_min, max_depth=args.max_depth,
            warmup=args.warmup, trees=args.trees or workers,
        )  # fmt: skip

    def searcher(self, make_engine, workers):
        return Searcher(make_engine, self.game, self.leaves, self.weights,
                        self.parallel_config(workers))  # fmt: skip

    def run(self, searcher_call, into):
        into.run(searcher_call, self.positions, self.config, self.args.seed)

    def measure(self, workers):
        """Timed passes on ``workers`` workers, each after a serial pass of the same
        split (root mode: as many trees) on the `SyncEngine`; and the games."""
        serial = self.searcher(hrl.SyncEngine, workers)
        try:
            for searcher_call in (serial.search, serial.plain_search):  # the network loads
                searcher_call(self.positions[0], self.config, self.args.seed)
            return self.measure_against(serial, workers)
        finally:
            serial.close()

    def measure_against(self, serial, workers):
        start = time.perf_counter()
        engine = self.searcher(
            lambda: hrl.Engine.local(n_workers=workers, threads_per_worker=1), workers
        )
        try:
            started = time.perf_counter()
            self.run(engine.search, Pass())  # the network loads in the workers
            self.startup[str(workers)] = {
                "cluster_s": round(started - start, 2),
                "warmup_pass_s": round(time.perf_counter() - started, 2),
            }
            before = engine.evaluator_stats()
            adjacent, timed = Pass(), Pass()
            for _ in range(self.args.repeats):
                self.run(serial.search, adjacent)
                self.run(engine.search, timed)
                self.run(serial.plain_search, self.plain)
            self.serial_all.add(adjacent)
            figures = {
                **timed.summary(),
                "adjacent_serial_sims_per_s": round(adjacent.rate, 1),
                "ratio_vs_serial": round(timed.rate / adjacent.rate, 3),
                # Seeds follow the tree, so the tasks should search as the SyncEngine did.
                "same_visits_as_serial": sum(
                    np.array_equal(a, b) for a, b in zip(timed.visits, adjacent.visits, strict=True)
                )
                / timed.moves,
                "evaluator": minus(engine.evaluator_stats(), before),
            }
            games = None
            if workers == 2 and self.args.games:
                games = decision_quality(self.game, serial, engine, self.args)
            return figures, games
        finally:
            engine.close()


def main():
    args = parse_args()
    bench = Bench(args)
    load_before = os.getloadavg()
    figures, games = {}, None
    for workers in args.workers:
        figures[str(workers)], found = bench.measure(workers)
        games = games or found

    ratio_2 = figures.get("2", {}).get("ratio_vs_serial")
    spec = bench.spec
    result = {
        "bench": "planning",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "game": bench.game.name,
        "network": f"{bench.network}, {spec.channels} channels, {spec.blocks} blocks",
        "positions": len(bench.positions),
        "simulations": args.simulations,
        "batch_size": args.batch_size,
        "parallel": vars(bench.parallel_config(2)) | {"trees": args.trees or "workers"},
        "repeats": args.repeats,
        "serial_sims_per_s": round(bench.serial_all.rate, 1),
        "serial": bench.serial_all.summary(),
        "serial_plain_search_sims_per_s": round(bench.plain.rate, 1),
        "workers": figures,
        "ratio_2_workers": ratio_2,
        "target": TARGET,
        "within_target": ratio_2 is not None and ratio_2 >= TARGET,
        "startup_s": bench.startup,
        # Other processes on the machine take cores from the workers, not from the
        # serial baseline: a load average near the core count before the run voids it.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if games is not None:
        result["games"] = games
    print(json.dumps(result))


def decision_quality(game, serial, engine, args):
    """Win rates of the serial and the 2-worker searcher against UCT at one budget."""
    config = SearchConfig(
        simulations=args.game_simulations, batch_size=args.batch_size, dirichlet_fraction=0.0
    )
    opponent = uct_player(args.game_simulations)
    matches = {}
    for name, searcher in (("serial", serial), ("2_workers", engine)):
        player = SearchingPlayer(searcher, config, name)
        rng = np.random.default_rng(args.seed)
        start = time.perf_counter()
        matches[name] = play_match(game, player, opponent, args.games, rng)
        matches[name]["seconds"] = round(time.perf_counter() - start, 1)
    difference = matches["2_workers"]["win_rate"] - matches["serial"]["win_rate"]
    return {
        "opponent": opponent.name,
        "simulations": args.game_simulations,
        **matches,
        "win_rate_difference": round(difference, 3),
        "within_0.05": abs(difference) <= 0.05,
    }


if __name__ == "__main__":
    main()
