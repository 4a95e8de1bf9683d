"""Engine overhead against raw Dask, measured in one run on one cluster.

Prints one JSON line: no-op round-trip latency and 5,000-task throughput through
the engine and through the raw ``distributed.Client`` (as one ``map`` batch, and
as a loop of single ``submit`` calls), a stateful-worker call, the same call
made direct, and a Dask actor call (latency and the driver's CPU per call), and
a nested depth-3 tree.

Targets: engine latency <= 1.15x raw, engine throughput >= 0.85x raw.

    python bench/engine_overhead.py [--tasks 5000] [--rounds 200]
"""

import argparse
import json
import os
import platform
import statistics
import time

import hrl_tasks as hrl


def noop(x=None):
    return x


def tree(depth, fan_out):
    if depth == 0:
        return 1
    engine = hrl.current_engine()
    return sum(engine.gather([engine.submit(tree, depth - 1, fan_out) for _ in range(fan_out)]))


class Echo:
    def ping(self, x=None):
        return x


def median_latency(call, rounds):
    call()  # warm up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def driver_cpu(call, rounds):
    """CPU seconds of this (the driver's) process per call."""
    call()
    start = time.process_time()
    for _ in range(rounds):
        call()
    return (time.process_time() - start) / rounds


def throughput(run_batch, n_tasks, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run_batch(n_tasks)
        best = min(best, time.perf_counter() - start)
    return n_tasks / best


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per throughput batch")
    parser.add_argument("--rounds", type=int, default=200, help="round trips per latency figure")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with hrl.Engine.local(n_workers=args.workers, threads_per_worker=1) as engine:
        client = engine.client
        raw_latency = median_latency(lambda: client.submit(noop, pure=False).result(), args.rounds)
        engine_latency = median_latency(lambda: engine.submit(noop).result(), args.rounds)

        def raw_batch(n):
            client.gather(client.map(noop, range(n), pure=False))

        def engine_batch(n):
            engine.gather(engine.map(noop, range(n)))

        def raw_loop(n):
            client.gather([client.submit(noop, i, pure=False) for i in range(n)])

        def engine_loop(n):
            engine.gather([engine.submit(noop, i) for i in range(n)])

        raw_tput = throughput(raw_batch, args.tasks)
        engine_tput = throughput(engine_batch, args.tasks)
        raw_loop_tput = throughput(raw_loop, args.tasks)
        engine_loop_tput = throughput(engine_loop, args.tasks)

        echo = engine.create_worker(Echo)
        echo.ready()
        actor = client.submit(Echo, actor=True).result()
        calls = {
            "stateful_call": lambda: echo.call("ping").result(),
            "direct_call": lambda: echo.call("ping", direct=True).result(),
            "dask_actor_call": lambda: actor.ping().result(),
        }
        call_latency = {name: median_latency(call, args.rounds) for name, call in calls.items()}
        call_cpu = {name: driver_cpu(call, args.rounds) for name, call in calls.items()}
        tree_latency = median_latency(lambda: engine.submit(tree, 3, 3).result(), 20)

    figures = {
        "bench": "engine_overhead",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "workers": args.workers,
        "raw_latency_ms": round(raw_latency * 1e3, 3),
        "engine_latency_ms": round(engine_latency * 1e3, 3),
        "latency_ratio": round(engine_latency / raw_latency, 3),
        "raw_tasks_per_s": round(raw_tput, 1),
        "engine_tasks_per_s": round(engine_tput, 1),
        "throughput_ratio": round(engine_tput / raw_tput, 3),
        "raw_submit_loop_tasks_per_s": round(raw_loop_tput, 1),
        "engine_submit_loop_tasks_per_s": round(engine_loop_tput, 1),
        "submit_loop_throughput_ratio": round(engine_loop_tput / raw_loop_tput, 3),
        **{f"{name}_ms": round(t * 1e3, 3) for name, t in call_latency.items()},
        **{f"{name}_driver_cpu_ms": round(t * 1e3, 3) for name, t in call_cpu.items()},
        "nested_tree_depth3_fanout3_ms": round(tree_latency * 1e3, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
