"""Does speculation pay? Bulk-synchronous rounds with and without stragglers.

Rounds of 16 tasks of 100-200 ms on 4 single-thread workers, in one run:

- clean: no straggler.
- persistent: one worker 10x slow, without and with speculation, and the same
  rounds on only the three healthy workers (the best any scheduler can do:
  Dask cannot stop a running task, so the slow worker's thread is lost).
  Targets: with speculation the median round <= 1.15x the three-healthy round
  and <= 0.5x the round without speculation.
- transient: every run independently 10x slow with probability 5% (a backup
  draws afresh), without and with speculation. Target: with speculation the
  mean round <= 1.3x clean.

Prints one JSON line with every figure.

    python bench/stragglers.py [--rounds 24]
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import hrl_tasks as hrl
from hrl_tasks.scheduler import clear_faults, inject_faults

TASKS_PER_ROUND = 16


def work(i, seconds):
    time.sleep(seconds)
    return i


def lengths(rng):
    return rng.uniform(0.1, 0.2, TASKS_PER_ROUND)


def engine_round(engine, seconds, speculative):
    start = time.perf_counter()
    refs = [engine.submit(work, i, s, speculative=speculative) for i, s in enumerate(seconds)]
    assert engine.gather(refs) == list(range(TASKS_PER_ROUND))
    return time.perf_counter() - start


def pinned_round(engine, seconds, workers):
    start = time.perf_counter()
    futures = engine.client.map(
        work,
        range(TASKS_PER_ROUND),
        seconds,
        workers=workers,
        allow_other_workers=False,
        pure=False,
    )
    assert engine.client.gather(futures) == list(range(TASKS_PER_ROUND))
    return time.perf_counter() - start


def scenario(
    rounds,
    seed,
    speculative=False,
    slow_factor=None,
    transient=None,
    healthy_only=False,
    coop=False,
):
    """Round times of one scenario on a fresh cluster (fresh statistics)."""
    rng = np.random.default_rng(seed)
    with hrl.Engine.local(n_workers=4, threads_per_worker=1) as engine:
        workers = sorted(engine.nthreads)
        engine_round(engine, lengths(rng), speculative)  # warm-up: durations for the planner
        if slow_factor:
            inject_faults(engine, slow_workers={workers[0]: slow_factor}, seed=seed)
        if transient:
            inject_faults(engine, transient=transient, seed=seed, cooperative=coop)
        times = []
        for _ in range(rounds):
            seconds = lengths(rng)
            if healthy_only:
                times.append(pinned_round(engine, seconds, workers[1:]))
            else:
                times.append(engine_round(engine, seconds, speculative))
        clear_faults(engine)
        stats = engine.stats()
    return times, stats


def summary(times):
    return {
        "median_s": round(statistics.median(times), 3),
        "mean_s": round(statistics.mean(times), 3),
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=24, help="measured rounds per scenario")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    r, s = args.rounds, args.seed

    clean, _ = scenario(r, s, speculative=True)
    pers_off, _ = scenario(r, s, speculative=False, slow_factor=10.0)
    pers_on, pers_stats = scenario(r, s, speculative=True, slow_factor=10.0)
    pers_best, _ = scenario(r, s, slow_factor=10.0, healthy_only=True)
    trans_off, _ = scenario(r, s, speculative=False, transient=(0.05, 10.0))
    trans_on, trans_stats = scenario(r, s, speculative=True, transient=(0.05, 10.0))
    coop_on, _ = scenario(r, s, speculative=True, transient=(0.05, 10.0), coop=True)

    med = statistics.median
    figures = {
        "bench": "stragglers",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "rounds": r,
        "tasks_per_round": TASKS_PER_ROUND,
        "clean": summary(clean),
        "persistent_no_spec": summary(pers_off),
        "persistent_spec": summary(pers_on),
        "persistent_three_healthy": summary(pers_best),
        "persistent_spec_over_three_healthy": round(med(pers_on) / med(pers_best), 3),
        "persistent_spec_over_no_spec": round(med(pers_on) / med(pers_off), 3),
        "transient_no_spec": summary(trans_off),
        "transient_spec": summary(trans_on),
        "transient_no_spec_over_clean": round(
            statistics.mean(trans_off) / statistics.mean(clean), 3
        ),
        "transient_spec_over_clean": round(statistics.mean(trans_on) / statistics.mean(clean), 3),
        "transient_spec_cooperative": summary(coop_on),
        "transient_spec_cooperative_over_clean": round(
            statistics.mean(coop_on) / statistics.mean(clean), 3
        ),
        "persistent_spec_stats": {
            k: pers_stats[k] for k in ("speculated", "backup_won", "original_won")
        },
        "transient_spec_stats": {
            k: trans_stats[k] for k in ("speculated", "backup_won", "original_won")
        },
        "time_saved_s": round(pers_stats["time_saved_s"] + trans_stats["time_saved_s"], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
