"""Algorithm throughput: IMPALA, APPO, Ape-X and ES on CartPole-v1, 2 and 4 workers; where the time goes.

In one run: the baselines, then IMPALA, APPO and Ape-X with 2 and 4 rollout
workers (env steps sampled and trained per second, and their ratio to their
baseline), then ES with 2 and 4 worker processes (antithetic pairs of
perturbations evaluated per second), then the baselines again.

The baselines are the fastest single-process loop (bench/sampling.py's: a
vector of 8 envs stepped with the policy's actions, nothing else) with the
policy the algorithm's rollout workers act with: the numpy copy of the
actor-critic for IMPALA and APPO, the torch Q-network acting epsilon-greedily
for Ape-X. Each is measured before and after the algorithms, and ratios are
taken against the mean of the two.
Every algorithm runs with the baseline's 8 envs per rollout worker and 64x64
MLP, its other keys at their defaults, on its own embedded cluster; train() is
called until warm (and, for Ape-X, learning), then repeatedly for --seconds.

Where the time goes, per run and over the measured window only: the stage
times of the results (``time_s``, summed), the steps sampled and trained,
engine counters and task durations (measured on the workers), the driver's
CPU seconds per thread ("IO loop" holds the Dask client, scheduler and nannies
of the embedded cluster) and the CPU seconds of each worker process. Prints
one JSON line; a run that fails is reported under ``errors``, the others still run.

    python bench/throughput.py [--seconds 10] [--only impala es] [--workers 2 4]
"""

import argparse
import faulthandler
import json
import os
import platform
import sys
import threading
import time
import traceback
from collections import defaultdict

import psutil
import torch

from hrl_tasks.algorithms import ALGORITHMS

# bench/sampling.py, found because this script's directory is on sys.path.
from sampling import ENVS, make_policy, plain_loop  # isort: skip

ENV = "CartPole-v1"
WORKER_COUNTS = (2, 4)
STEP_ALGORITHMS = ("impala", "appo", "apex")  # measured in env steps per second
RUNS = ("plain", *STEP_ALGORITHMS, "es")
BASELINE_OF = {"impala": "numpy_actor_critic", "appo": "numpy_actor_critic", "apex": "dqn"}
CONFIGS = {
    "impala": {"num_envs_per_worker": ENVS, "hidden": (64, 64)},
    "appo": {"num_envs_per_worker": ENVS, "hidden": (64, 64)},
    "apex": {"num_envs_per_worker": ENVS, "hidden": (64, 64)},  # Ape-X's default is 256x256
    "es": {"hidden": (64, 64)},  # no rollout workers: each antithetic pair is a task
    "a3c": {"num_envs_per_worker": ENVS, "hidden": (64, 64)},  # bench/cpu_profile.py's only
}
WARMUP_ITERATIONS = 2
MAX_WARMUP_ITERATIONS = 20  # Ape-X trains nothing until its shards hold learning_starts rows
HANG_REPORT_S = 120.0  # stack traces to stderr when a run takes this much longer than planned
INFO_KEYS = ("learner_queue_size", "learner_steps", "perturbations_per_s")
MIN_THREAD_CPU_S = 0.05  # smaller threads are summed as "other"


def baseline_policy(kind: str):
    """What the rollout workers act with: the actor-critic's numpy copy, or the 64x64
    DQN Q-network (torch, epsilon-greedy with epsilon 0.1)."""
    if kind == "numpy_actor_critic":
        return make_policy(numpy=True)
    import gymnasium as gym

    from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig

    env = gym.make(ENV)
    return DQNPolicy(
        env.observation_space,
        env.action_space,
        DQNPolicyConfig(hidden=(64, 64), seed=0, epsilon=0.1),
    )


def baselines(seconds: float) -> dict:
    """Env steps per second of the single-process loop with each baseline policy."""
    return {kind: plain_loop(seconds, policy=baseline_policy(kind))
            for kind in sorted(set(BASELINE_OF.values()))}  # fmt: skip


def cpu_snapshot() -> dict:
    """CPU seconds (user + system) of the driver, of each of its threads and of each child."""
    driver = psutil.Process()
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    children = {}
    for child in driver.children(recursive=True):
        try:
            times = child.cpu_times()
            command = " ".join(child.cmdline())
            # multiprocessing's helpers; worker processes forked from the forkserver
            # carry its command line too, but are its children.
            tracker = "resource_tracker" in command or (
                "forkserver" in command and child.ppid() == driver.pid
            )
        except psutil.Error:  # exited meanwhile
            continue
        children[child.pid] = ("other" if tracker else "worker", times.user + times.system)
    times = driver.cpu_times()
    return {
        "driver": times.user + times.system,
        "threads": {t.id: t.user_time + t.system_time for t in driver.threads()},
        "names": names,
        "children": children,
    }


def cpu_breakdown(before: dict, after: dict) -> dict:
    """CPU seconds spent between two snapshots: driver, its threads by name, worker processes.

    Threads without a Python name (torch's, the allocator's) are ``native``; a
    child that exited before ``after`` is missing from the figures.
    """
    names = {**before["names"], **after["names"]}
    by_thread: dict[str, float] = defaultdict(float)
    for tid, seconds in after["threads"].items():
        by_thread[names.get(tid, "native")] += seconds - before["threads"].get(tid, 0.0)
    threads = {name: s for name, s in by_thread.items() if s >= MIN_THREAD_CPU_S}
    threads["other"] = sum(s for s in by_thread.values() if s < MIN_THREAD_CPU_S)
    workers, other_children = [], 0.0
    for pid, (kind, seconds) in after["children"].items():
        spent = seconds - before["children"].get(pid, (kind, 0.0))[1]
        if kind == "worker":
            workers.append(spent)
        else:
            other_children += spent
    return {
        "driver_cpu_s": round(after["driver"] - before["driver"], 2),
        "driver_threads_cpu_s": {
            name: round(s, 2) for name, s in sorted(threads.items(), key=lambda kv: -kv[1])
        },
        "worker_processes_cpu_s": sorted((round(s, 2) for s in workers), reverse=True),
        "other_children_cpu_s": round(other_children, 2),
    }


def engine_breakdown(before: dict, after: dict) -> dict:
    """Engine counters that moved, and per task name the calls made and their median duration."""
    counters = {
        key: round(value - before.get(key, 0), 3)
        for key, value in after.items()
        if key != "by_name" and value != before.get(key, 0)
    }
    tasks = {}
    for name, summary in after["by_name"].items():
        count = summary["count"] - before["by_name"].get(name, {}).get("count", 0)
        if count:
            tasks[name] = {"count": count, "p50_ms": round(1000 * summary.get("p50", 0.0), 2)}
    return {"counters": counters, "tasks": tasks}


def warm_up(algo) -> dict:
    """train() a few times, and on until something was trained (Ape-X's learning_starts)."""
    for iteration in range(MAX_WARMUP_ITERATIONS):
        result = algo.train()
        if iteration + 1 >= WARMUP_ITERATIONS and result["env_steps_trained"] > 0:
            break
    return result


def measure(name: str, num_workers: int, seconds: float, overrides: dict | None = None) -> dict:
    """Build the algorithm, warm it up, then call train() for ``seconds``; rates and breakdown."""
    faulthandler.dump_traceback_later(seconds + HANG_REPORT_S)
    try:
        config = {**CONFIGS[name], **(overrides or {})}
        algo = ALGORITHMS[name](env=ENV, seed=0, num_workers=num_workers, **config)
        try:
            first = warm_up(algo)
            engine_before, cpu_before = algo.engine.stats(), cpu_snapshot()
            stage_s: dict[str, float] = defaultdict(float)
            iterations, result = 0, first
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                result = algo.train()
                iterations += 1
                for stage, spent in result["time_s"].items():
                    stage_s[stage] += spent
            elapsed = time.perf_counter() - start
            cpu_after, engine_after = cpu_snapshot(), algo.engine.stats()
            config = algo.config
        finally:
            algo.stop()
    finally:
        faulthandler.cancel_dump_traceback_later()
    time.sleep(2.0)  # let the worker processes exit before the next measurement
    sampled = result["env_steps_sampled"] - first["env_steps_sampled"]
    trained = result["env_steps_trained"] - first["env_steps_trained"]
    episodes = result["episodes_total"] - first["episodes_total"]
    breakdown = {
        "iterations": iterations,
        "wall_s": round(elapsed, 2),
        "env_steps_sampled": sampled,
        "env_steps_trained": trained,
        "episodes": episodes,
        "episode_return_mean": round(result["episode_return_mean"], 1),
        "stage_s": {stage: round(s, 2) for stage, s in stage_s.items()},
        "info": {k: round(result["info"][k], 2) for k in INFO_KEYS if k in result["info"]},
        "engine": engine_breakdown(engine_before, engine_after),
        **cpu_breakdown(cpu_before, cpu_after),
    }
    if name != "es":
        breakdown["steps_per_sample_call"] = (
            config.num_envs_per_worker * config.rollout_fragment_length
        )
    return {
        "sampled_steps_per_s": sampled / elapsed,
        "trained_steps_per_s": trained / elapsed,
        # ES: an evaluation is one perturbed policy (theta + sigma eps, or theta - sigma eps),
        # episodes_per_perturbation episodes; each task evaluates an antithetic pair of them.
        "evaluations_per_s": episodes / config.episodes_per_perturbation / elapsed
        if name == "es"
        else None,
        "breakdown": breakdown,
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per setting")
    parser.add_argument("--only", nargs="+", choices=RUNS, help="runs to do (default all)")
    parser.add_argument(
        "--workers", nargs="+", type=int, default=list(WORKER_COUNTS), help="worker counts"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ALGO.KEY=VALUE",
        help="a config key of one algorithm, e.g. impala.train_batch_size=1024",
    )
    args = parser.parse_args()
    overrides: dict[str, dict] = defaultdict(dict)
    for item in args.set:
        target, _, value = item.partition("=")
        name, _, key = target.partition(".")
        overrides[name][key] = json.loads(value)
    only = args.only or RUNS
    torch.set_num_threads(1)  # as rollout processes and the learners (learner_threads=1) do
    figures: dict = {}
    breakdowns, errors = {}, {}
    before = baselines(args.seconds) if "plain" in only else {}
    for name in (n for n in RUNS if n != "plain" and n in only):
        if name not in ALGORITHMS:
            errors[name] = f"no algorithm {name!r} here"
            continue
        for num_workers in args.workers:
            run = f"{name}_{num_workers}"
            try:
                measured = measure(name, num_workers, args.seconds, overrides.get(name))
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                errors[run] = f"{type(exc).__name__}: {exc}"
                time.sleep(2.0)
                continue
            breakdowns[run] = measured["breakdown"]
            if name == "es":
                evaluations_per_s = measured["evaluations_per_s"]
                figures[f"{run}_antithetic_pairs_per_s"] = round(evaluations_per_s / 2, 1)
                figures[f"{run}_perturbed_evaluations_per_s"] = round(evaluations_per_s, 1)
                figures[f"{run}_env_steps_per_s"] = round(measured["sampled_steps_per_s"])
                continue
            for kind in ("sampled", "trained"):
                figures[f"{run}_{kind}_steps_per_s"] = round(measured[f"{kind}_steps_per_s"])
    after = baselines(args.seconds) if "plain" in only else {}
    plain = {kind: (before[kind] + after[kind]) / 2 for kind in before}
    for kind in plain:
        figures[f"baseline_{kind}_steps_per_s"] = [round(before[kind]), round(after[kind])]
    for key in [
        k for k in figures if k.endswith("_steps_per_s") and k.split("_")[0] in BASELINE_OF
    ]:
        baseline = plain.get(BASELINE_OF[key.split("_")[0]])
        ratio = None if not baseline else round(figures[key] / baseline, 3)
        figures[key.replace("_steps_per_s", "_vs_baseline")] = ratio
    print(
        json.dumps(
            {
                "bench": "throughput",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                "env": ENV,
                "envs_per_worker": ENVS,
                "seconds": args.seconds,
                "overrides": overrides,
                **figures,
                "errors": errors,
                "breakdown": breakdowns,
            }
        )
    )


if __name__ == "__main__":
    main()
