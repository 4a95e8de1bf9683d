"""The cost of nesting an algorithm inside a task: PPO trained in a task against PPO in the driver.

Time per ``train()`` iteration of PPO on CartPole-v1 (one rollout worker, 4
envs, 128-step fragments, 512-step train batches, 4 SGD passes of 128-step
minibatches, a fixed seed) on one embedded cluster of 2 worker processes with
1 thread each, built two ways:

- top level (the baseline): in the driver, with ``engine=engine``;
- in a task: ``engine.submit(train_in_task, ...)``, whose function builds the
  same PPO with ``engine=hrl_tasks.current_engine()`` and trains it on the
  worker that runs the task (its rollout worker is a nested stateful worker).

Each pass builds the algorithm, runs ``--warmup`` iterations (not timed), times
``--iterations`` iterations one ``train()`` call at a time, and stops it; its
figure is the median iteration time. Passes alternate (top level, in task, top
level, in task, ...) for ``--repeats`` rounds, so that drift of the machine's
speed hits both sides, and the ratio is the median of the in-task / top-level
ratios of the pairs of each round. Build and stop times are reported per side
(the first pass of each side also pays the imports of its processes), and
for the in-task side the time from ``submit`` to its result less the time spent
inside the task (sending the task, starting it, returning its result).

Target: in a task at most 1.1x the top-level iteration time.

The task's function is defined in this file, which runs as ``__main__``: Dask
sends such functions by value (cloudpickle), as it does bench/planning.py's
``worker_evaluator_stats``, so the workers need not import this file. The
worker processes are spawned and re-import it as ``__mp_main__``, hence the
``__main__`` guard at the end.

    python bench/nesting.py [--iterations 20] [--warmup 2] [--repeats 3]

With the defaults it takes a few minutes on 2 cores.
"""

import argparse
import json
import os
import platform
import statistics
import time

import hrl_tasks as hrl
from hrl_tasks.algorithms import PPO

TARGET = 1.1
CONFIG = {
    "env": "CartPole-v1",
    "num_workers": 1,
    "num_envs_per_worker": 4,
    "rollout_fragment_length": 128,
    "train_batch_size": 512,
    "minibatch_size": 128,
    "num_sgd_iter": 4,
    "seed": 0,
}


def timed_pass(engine, warmup: int, iterations: int) -> dict:
    """Build PPO on ``engine``, warm it up, time each ``train()`` call, stop it."""
    start = time.perf_counter()
    algo = PPO(CONFIG, engine=engine)
    built = time.perf_counter()
    try:
        for _ in range(warmup):
            algo.train()
        seconds = []
        for _ in range(iterations):
            before = time.perf_counter()
            algo.train()
            seconds.append(time.perf_counter() - before)
    finally:
        stopping = time.perf_counter()
        algo.stop()
    stopped = time.perf_counter()
    return {
        "build_s": built - start,
        "iteration_s": seconds,
        "stop_s": stopped - stopping,
        "inside_s": stopped - start,
    }


def train_in_task(warmup: int, iterations: int) -> dict:
    """Run in a task: the same pass, on the engine of the worker that runs it."""
    return timed_pass(hrl.current_engine(), warmup, iterations)


def top_level(engine, args) -> dict:
    return timed_pass(engine, args.warmup, args.iterations)


def in_task(engine, args) -> dict:
    start = time.perf_counter()
    found = engine.submit(train_in_task, args.warmup, args.iterations).result()
    found["task_overhead_s"] = time.perf_counter() - start - found["inside_s"]
    return found


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


def summary(passes: list[dict]) -> dict:
    """A side's figures: medians over passes of the per-pass medians, and each pass's."""
    medians = [statistics.median(p["iteration_s"]) for p in passes]
    figures = {
        "median_iteration_ms": ms(statistics.median(medians)),
        "pass_median_iteration_ms": [ms(m) for m in medians],
        "build_s": [round(p["build_s"], 2) for p in passes],
        "median_build_s": round(statistics.median(p["build_s"] for p in passes), 2),
        "stop_s": [round(p["stop_s"], 2) for p in passes],
        "median_stop_s": round(statistics.median(p["stop_s"] for p in passes), 2),
    }
    if "task_overhead_s" in passes[0]:
        figures["task_overhead_s"] = [round(p["task_overhead_s"], 3) for p in passes]
    return figures


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=20, help="timed train() calls per pass")
    parser.add_argument("--warmup", type=int, default=2, help="untimed train() calls per pass")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of one pass per side")
    args = parser.parse_args()
    if args.iterations < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--iterations and --repeats must be >= 1, --warmup >= 0")
    return args


def main():
    args = parse_args()
    load_before = os.getloadavg()
    start = time.perf_counter()
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        cluster_s = time.perf_counter() - start
        sides = {"top_level": [], "in_task": []}
        for _ in range(args.repeats):
            sides["top_level"].append(top_level(engine, args))
            sides["in_task"].append(in_task(engine, args))

    top, task = summary(sides["top_level"]), summary(sides["in_task"])
    ratios = [
        statistics.median(b["iteration_s"]) / statistics.median(a["iteration_s"])
        for a, b in zip(sides["top_level"], sides["in_task"], strict=True)
    ]
    ratio = round(statistics.median(ratios), 3)
    result = {
        "bench": "nesting",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "algorithm": "PPO",
        "config": CONFIG,
        "cluster": "Engine.local(n_workers=2, threads_per_worker=1)",
        "cluster_start_s": round(cluster_s, 2),
        "warmup": args.warmup,
        "iterations": args.iterations,
        "repeats": args.repeats,
        "top_level": top,
        "in_task": task,
        "pair_ratios": [round(r, 3) for r in ratios],
        "ratio_in_task_vs_top_level": ratio,
        "target": TARGET,
        "within_target": ratio <= TARGET,
        # Other processes on the machine take cores from both sides, not always evenly:
        # a load average near the core count before the run makes the ratio noisy.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
