"""ASHA against FIFO over the same 8 PPO trials on CartPole-v1, on one embedded cluster.

Eight configurations (PPO's learning rate on a grid log-spaced from 1e-5 to
1e-1, everything else at its defaults, seed 0), each trial stopped at a mean return of 450 or after
``--max-t`` iterations, searched twice on the same cluster of 2 worker
processes with 1 thread each (one CPU slot each, so two trials at once: each
trial's task holds one, its rollout workers nothing):

- FIFO: every trial runs to its end (450 or ``--max-t``);
- ASHA: rungs at ``--grace`` x rf^k iterations (rf: ``--reduction-factor``, 2 by
  default), a trial continuing past a rung only if in the top 1/rf of those
  recorded there so far.

Reported per search: its whole wall time (``tune`` called to returned), the
wall time until the first trial reached 450 (its end, since reaching 450 ends
it), how many trials reached 450, and the best return. The ratio is ASHA's
total over FIFO's; with ``--repeats`` > 1 the searches alternate (FIFO, ASHA,
FIFO, ...) and the ratio is the median of the rounds' ratios.

Target: ASHA's total at most 0.5x FIFO's, with its best trial reaching 450.

    python bench/search.py [--max-t 100] [--grace 8] [--reduction-factor 2] [--repeats 1]
        [--out runs/bench-search]

Prints one JSON line. With the defaults it takes about 5 minutes on 2 cores.
"""

import argparse
import json
import platform
import statistics
import time

import hrl_tasks
from hrl_tasks.search import ASHAScheduler, FIFOScheduler, grid

# Log-spaced over four decades, as a search over loguniform(1e-5, 1e-1) draws them.
LEARNING_RATES = [float(f"{10 ** (-5 + 4 * k / 7):.2g}") for k in range(8)]
TARGET = 450.0


def search(engine, scheduler, max_t: int, out: str) -> dict:
    start = time.time()
    result = hrl_tasks.tune(
        "ppo", env="CartPole-v1", space={"lr": grid(LEARNING_RATES)}, config={"seed": 0},
        num_samples=1, sampler="grid", scheduler=scheduler,
        stop={"episode_return_mean": TARGET, "iteration": max_t}, out=out, engine=engine,
        verbose=False,
    )  # fmt: skip
    total = time.time() - start
    solved = [t for t in result.trials if (t["best"] or 0) >= TARGET]
    return {
        "total_s": round(total, 1),
        "first_450_s": round(min(t["end_time"] for t in solved) - start, 1) if solved else None,
        "trials_reaching_450": len(solved),
        "best_return": result.best_trial["best"] if result.best_trial else None,
        "iterations": sum(t["iterations"] for t in result.trials),
        "statuses": {s: sum(t["status"] == s for t in result.trials)
                     for s in ("TERMINATED", "STOPPED", "ERROR")},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-t", type=int, default=100)
    parser.add_argument("--grace", type=int, default=8)
    parser.add_argument("--reduction-factor", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="runs/bench-search")
    args = parser.parse_args()
    rounds = []
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        for k in range(args.repeats):
            fifo = search(engine, FIFOScheduler(), args.max_t, f"{args.out}/fifo-{k}")
            asha = ASHAScheduler(
                max_t=args.max_t, grace_period=args.grace, reduction_factor=args.reduction_factor
            )
            rounds.append(
                {"fifo": fifo, "asha": search(engine, asha, args.max_t, f"{args.out}/asha-{k}")}
            )
    ratios = [r["asha"]["total_s"] / r["fifo"]["total_s"] for r in rounds]
    print(json.dumps({
        "bench": "search", "trials": len(LEARNING_RATES), "max_t": args.max_t,
        "grace": args.grace, "reduction_factor": args.reduction_factor, "rounds": rounds, "asha_over_fifo_total": round(
            statistics.median(ratios), 3),
        "target": 0.5, "asha_best_reaches_450": all(
            r["asha"]["trials_reaching_450"] > 0 for r in rounds),
        "machine": {"cores": __import__("os").cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
