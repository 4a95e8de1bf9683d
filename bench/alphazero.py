"""AlphaZero at Connect Four: timed training, then matches, for one or more settings.

Each arm trains on the embedded 2-worker cluster for ``--minutes`` with no evaluation
games in that time (the minutes are self-play and learning only), saving a checkpoint
every ``--curve-every`` minutes. After training, each checkpoint plays
``--curve-games`` games against each opponent (the curve), and the last plays
``--games`` fresh games against each (the result), all as tasks on the same cluster,
the agent moving first in half of them and searching ``evaluation_simulations``
(1,000) a move without noise. Scores count a win 1 and a draw 1/2.

The arms differ in one thing each (``ARMS``), so that a table of them says what
mattered. Each arm's line records its throughput as well: simulations per second of
search, positions trained per second of training, the mean leaves per network call.

Prints one JSON line per arm and writes ``docs/learning/alphazero-connect4-<arm>.png``
(score against each opponent over training time) and the last checkpoint to
``--out``. Long: an arm of 20 minutes with 50-game matches takes about 40 minutes.

    python bench/alphazero.py --arms gumbel --minutes 60 --games 100
    python bench/alphazero.py --arms puct gumbel gumbel-cap --minutes 20 --games 50

``--throughput ROUNDS`` plays no matches: it trains the arms in turn, ``--minutes``
each, for ROUNDS rounds (interleaved, as this machine's speed drifts within hours)
and prints one JSON line with each arm's median simulations/s, positions/s and
leaves per search request, and their ratios to the first arm's:

    python bench/alphazero.py --throughput 2 --minutes 3 \
        --arms gumbel-less-replay gumbel-cache gumbel-threads gumbel-learner
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

BASE = {
    "env": "connect_four_v3", "num_workers": 2, "channels": 64, "blocks": 3,
    "games_per_iteration": 8, "temperature_moves": 10, "updates_per_iteration": 60,
    "evaluation_interval": 0, "evaluation_simulations": 1000, "evaluation_time_s": 3600,
}  # fmt: skip

GUMBEL = {"search_rule": "gumbel", "simulations": 32, "games_per_iteration": 32}

ARMS = {
    # the documented 2026-11-23 run's search: PUCT, 200 simulations a self-play move
    "puct": {"simulations": 200},
    # Gumbel AlphaZero: sequential halving at the root, the policy from completed Q
    "gumbel": {"search_rule": "gumbel", "simulations": 32},
    # ... with 32 games an iteration for its 60 updates: each position is trained on a
    # quarter as often (both arms above are bound by the learner, not by self-play)
    "gumbel-less-replay": GUMBEL,
    # the arms below differ from gumbel-less-replay in one thing each
    # PUCT at AlphaZero's 200 simulations a move, 32 games an iteration
    "puct-less-replay": {"simulations": 200, "games_per_iteration": 32},
    # playout-cap randomization: a quarter of the moves in full (64), the rest 16
    "gumbel-cap": {**GUMBEL, "simulations": 64, "full_search_fraction": 0.25,
                   "fast_simulations": 16},
    # a transposition cache in each worker's evaluator
    "gumbel-cache": {**GUMBEL, "evaluator_cache": 100_000},
    # two games at once per worker process sharing its evaluator
    "gumbel-threads": {**GUMBEL, "threads_per_worker": 2},
    # the learner in a learner worker process, leaving the driver's core
    "gumbel-learner": {**GUMBEL, "num_learners": 1},
    # half of the value target from the search's value (value_target_search)
    "gumbel-value-mix": {**GUMBEL, "value_target_search": 0.5},
    # the learning rate decayed tenfold over the second half of a 20-minute run's moves
    "gumbel-lr-decay": {**GUMBEL, "lr_schedule": ((0, 2e-3), (50_000, 2e-3), (100_000, 2e-4))},
    # a buffer four times as long: 100,000 moves with their mirror images, about 19 minutes
    "gumbel-big-buffer": {**GUMBEL, "buffer_size": 200_000},
}  # fmt: skip

OPPONENTS = ("random", "uct-1000", "alphabeta-4")


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train_arm(arm: str, config: dict, minutes: float, curve_every: float, out: Path) -> dict:
    """Trains for ``minutes``; returns the last result and the checkpoints by minute."""
    from hrl_tasks.algorithms import AlphaZero

    algo = AlphaZero(config)
    checkpoints, last, start = [], {}, time.perf_counter()
    next_save = curve_every * 60
    try:
        while (elapsed := time.perf_counter() - start) < minutes * 60:
            if elapsed >= next_save:
                checkpoints.append((elapsed / 60, algo.save(out / f"{arm}-{len(checkpoints)}.hrl")))
                next_save += curve_every * 60
            last = algo.train()
        checkpoints.append(((time.perf_counter() - start) / 60, algo.save(out / f"{arm}.hrl")))
    finally:
        algo.stop()
    return {"last": last, "checkpoints": checkpoints}


def play(checkpoint: Path, games: int) -> dict[str, float]:
    """``games`` evaluation games of a checkpoint against each opponent, on a new cluster."""
    import hrl_tasks

    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = hrl_tasks.load(checkpoint, engine=engine,
                              config={"evaluation_games": games, "opponents": OPPONENTS})  # fmt: skip
        try:
            return algo.evaluate()
        finally:
            algo.stop()


def run_arm(arm: str, args) -> dict:
    from hrl_tasks.plotting import plot_win_rates

    config = {**BASE, **ARMS[arm], "seed": args.seed}
    trained_on, start = commit(), time.perf_counter()
    trained = train_arm(arm, config, args.minutes, args.curve_every, args.out)
    curve = []
    for k, (minute, path) in enumerate(trained["checkpoints"][:-1]):
        curve.append({"time_total_s": minute * 60, "evaluations": k + 1,
                      **play(path, args.curve_games)})  # fmt: skip
    minute, final_path = trained["checkpoints"][-1]
    final = play(final_path, args.games)
    curve.append({"time_total_s": minute * 60, "evaluations": len(curve) + 1, **final})
    name = arm if args.minutes == 20 else f"{arm}-{args.minutes:g}min"
    plot = plot_win_rates(curve, Path("docs/learning") / f"alphazero-connect4-{name}.png",
                          title=f"AlphaZero, Connect Four: {arm} (seed {args.seed})")  # fmt: skip
    last = trained["last"]
    return {
        "bench": "alphazero", "arm": arm, "date": time.strftime("%Y-%m-%d"), "commit": trained_on,
        "machine": f"{platform.machine()}, 2 cores", "seed": args.seed,
        "settings": ARMS[arm], "training_minutes": round(minute, 2),
        "iterations": last.get("iteration"), "self_play_games": last.get("games"),
        "moves": last.get("env_steps_sampled"), "updates": last.get("updates"),
        "trained_positions": round(last.get("positions_per_s", 0) * last.get("time_total_s", 0)),
        "simulations_per_s": round(last.get("simulations_per_s", 0)),
        "positions_per_s": round(last.get("positions_per_s", 0), 2),
        "leaf_batch_mean": round(last.get("leaf_batch_mean", 0), 2),
        "games_per_opponent": args.games,
        "score": {o: final[f"score/{o}"] for o in OPPONENTS},
        "won": {o: final[f"win_rate/{o}"] for o in OPPONENTS},
        "lost": {o: final[f"loss_rate/{o}"] for o in OPPONENTS},
        "curve": [{"minute": round(c["time_total_s"] / 60, 1),
                   **{o: c[f"score/{o}"] for o in OPPONENTS}} for c in curve],
        "plot": str(plot), "wall_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip


def throughput(args) -> dict:
    """Interleaved short trainings of ``args.arms``; medians and ratios to the first arm."""
    import statistics

    rates = ("simulations_per_s", "positions_per_s", "leaf_batch_mean")
    runs: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    trained_on, out = commit(), args.out / "throughput"
    out.mkdir(parents=True, exist_ok=True)
    for _ in range(args.throughput):
        for arm in args.arms:
            config = {**BASE, **ARMS[arm], "seed": args.seed}
            last = train_arm(arm, config, args.minutes, args.minutes + 1, out)["last"]
            runs[arm].append({rate: last.get(rate, 0.0) for rate in rates})
    medians = {arm: {rate: statistics.median(r[rate] for r in runs[arm]) for rate in rates}
               for arm in args.arms}  # fmt: skip
    base = medians[args.arms[0]]
    return {
        "bench": "alphazero-throughput", "date": time.strftime("%Y-%m-%d"),
        "commit": trained_on, "machine": f"{platform.machine()}, 2 cores",
        "minutes": args.minutes, "rounds": args.throughput, "baseline": args.arms[0],
        "median": {arm: {r: round(v, 2) for r, v in m.items()} for arm, m in medians.items()},
        "ratio": {arm: {r: round(m[r] / base[r], 3) if base[r] else None for r in rates}
                  for arm, m in medians.items()},
        "runs": runs,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=["gumbel"])
    parser.add_argument("--minutes", type=float, default=20.0, help="training time per arm")
    parser.add_argument("--games", type=int, default=50, help="final games per opponent")
    parser.add_argument("--curve-every", type=float, default=10.0, help="minutes between points")
    parser.add_argument("--curve-games", type=int, default=10, help="games per curve point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-alphazero"))
    parser.add_argument("--throughput", type=int, default=0, metavar="ROUNDS",
                        help="no matches: ROUNDS interleaved rounds of the arms' throughput")  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.throughput:
        line = throughput(args)
        print(json.dumps(line), flush=True)
        with (args.out / "throughput.jsonl").open("a") as log:
            log.write(json.dumps(line) + "\n")
        return
    for arm in args.arms:
        line = run_arm(arm, args)
        print(json.dumps(line), flush=True)
        with (args.out / "results.jsonl").open("a") as log:
            log.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
