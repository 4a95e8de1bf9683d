"""What a task costs: the engine against raw Dask and against Ray, on the same machine.

Each system runs in its own subprocess (a fresh interpreter and cluster), in an
order rotated over ``--system-rounds`` rounds (3: each system first once);
the figures are the medians over the rounds. Prints one JSON line: per system
its figures, and the ratios the targets are set on.

The shapes, the same on every side:
The engine runs twice: ``hrl_tasks`` on the direct route (placed by the engine,
sent straight to the workers), ``hrl_tasks_dask_route`` through Dask's scheduler;
``hrl_tasks_tls`` is the direct route on a cluster that requires TLS (as a
``--runner`` run does by default: the direct route cannot take over a TLS
socket, so its messages go through Dask's comm), not in the default systems.

- ``task_ms``: a no-op task's round trip (submit, then wait for the result),
  median of ``--rounds``;
- ``map_tasks_per_s``: ``--tasks`` no-op tasks submitted at once, then gathered
  (``engine.map``, ``client.map``; Ray has no map: one ``.remote()`` each);
  ``submit_loop_tasks_per_s``: the same, one submit call per task;
- ``tree_ms``: a nested tree, depth 3, fan-out 3 (40 tasks), each inner task
  submitting its children and waiting for them;
- ``call_ms`` (and ``call_driver_cpu_ms``, this process's CPU per call): a
  stateful call's round trip: the engine's direct call, a Dask actor's call,
  a Ray actor's call; the engine's call as a task pinned to its worker is
  ``task_call_ms``;
- ``calls_in_flight_per_s``: ``--tasks`` calls to one object sent at once, then
  gathered; for Ray also to an async actor (``async def`` methods), the target's
  reference.

Ray runs under ``ray.init(num_cpus=WORKERS, include_dashboard=False)`` when it
is installed (the ``bench`` extra); the engine and Dask on ``Engine.local`` with
WORKERS worker processes of 1 thread.

Targets: the engine's latency <= 1.15x raw Dask's and its map >= 0.85x (the
engine adds little to Dask); against Ray: task round trip <= 0.7x, map >= 1.5x,
tree <= 0.7x, calls in flight >= 1.0x Ray's async actor.

    python bench/engine_overhead.py [--tasks 5000] [--rounds 200] [--workers 2]
        [--system-rounds 3] [--systems hrl_tasks dask ray]
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time

SYSTEMS = ("hrl_tasks", "hrl_tasks_dask_route", "dask", "ray", "hrl_tasks_tls")


def noop(x=None):
    return x


def tree(depth, fan_out):
    if depth == 0:
        return 1
    import hrl_tasks as hrl

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


def measure_hrl_tasks(args, route: str = "direct") -> dict:
    import hrl_tasks as hrl

    with hrl.Engine.local(n_workers=args.workers, threads_per_worker=1, route=route) as engine:
        echo = engine.create_worker(Echo)
        echo.ready()
        direct = lambda: echo.call("ping", direct=True).result()  # noqa: E731
        figures = {
            "task_ms": median_latency(lambda: engine.submit(noop).result(), args.rounds) * 1e3,
            "map_tasks_per_s": throughput(
                lambda n: engine.gather(engine.map(noop, range(n))), args.tasks
            ),
            "submit_loop_tasks_per_s": throughput(
                lambda n: engine.gather([engine.submit(noop, i) for i in range(n)]), args.tasks
            ),
            "tree_ms": median_latency(lambda: engine.submit(tree, 3, 3).result(), 20) * 1e3,
            "task_call_ms": median_latency(lambda: echo.call("ping").result(), args.rounds) * 1e3,
            "call_ms": median_latency(direct, args.rounds) * 1e3,
            "call_driver_cpu_ms": driver_cpu(direct, args.rounds) * 1e3,
        }
        try:  # last: it may break the object (each call in flight holds a connection)
            figures["calls_in_flight_per_s"] = throughput(
                lambda n: engine.gather([echo.call("ping", i, direct=True) for i in range(n)]),
                args.tasks,
            )
        except Exception as exc:
            figures["calls_in_flight_per_s"], figures["calls_in_flight_error"] = None, repr(exc)
        return figures


def measure_hrl_tasks_tls(args) -> dict:
    from distributed.security import Security

    import hrl_tasks as hrl

    tls = {"protocol": "tls://", "security": Security.temporary()}
    with hrl.Engine.local(n_workers=args.workers, threads_per_worker=1, **tls) as engine:
        return {
            "task_ms": median_latency(lambda: engine.submit(noop).result(), args.rounds) * 1e3,
            "map_tasks_per_s": throughput(
                lambda n: engine.gather(engine.map(noop, range(n))), args.tasks
            ),
        }


def measure_dask(args) -> dict:
    import hrl_tasks as hrl

    # The engine's cluster and client (its 1 ms send interval), used raw.
    with hrl.Engine.local(n_workers=args.workers, threads_per_worker=1) as engine:
        client = engine.client
        actor = client.submit(Echo, actor=True).result()
        call = lambda: actor.ping().result()  # noqa: E731

        def in_flight(n):
            for future in [actor.ping(i) for i in range(n)]:
                future.result()

        return {
            "task_ms": median_latency(lambda: client.submit(noop, pure=False).result(), args.rounds)
            * 1e3,  # fmt: skip
            "map_tasks_per_s": throughput(
                lambda n: client.gather(client.map(noop, range(n), pure=False)), args.tasks
            ),
            "submit_loop_tasks_per_s": throughput(
                lambda n: client.gather([client.submit(noop, i, pure=False) for i in range(n)]),
                args.tasks,
            ),
            "call_ms": median_latency(call, args.rounds) * 1e3,
            "call_driver_cpu_ms": driver_cpu(call, args.rounds) * 1e3,
            "calls_in_flight_per_s": throughput(in_flight, args.tasks),
        }


def measure_ray(args) -> dict:
    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    try:
        remote_noop = ray.remote(noop)

        @ray.remote
        def ray_tree(depth, fan_out):
            if depth == 0:
                return 1
            return sum(ray.get([ray_tree.remote(depth - 1, fan_out) for _ in range(fan_out)]))

        @ray.remote
        class AsyncEcho:
            async def ping(self, x=None):
                return x

        echo = ray.remote(Echo).remote()
        async_echo = AsyncEcho.remote()
        ray.get([echo.ping.remote(), async_echo.ping.remote()])
        call = lambda: ray.get(echo.ping.remote())  # noqa: E731
        batch = lambda n: ray.get([remote_noop.remote(i) for i in range(n)])  # noqa: E731
        return {
            "task_ms": median_latency(lambda: ray.get(remote_noop.remote()), args.rounds) * 1e3,
            "map_tasks_per_s": throughput(batch, args.tasks),
            "submit_loop_tasks_per_s": throughput(batch, args.tasks),
            "tree_ms": median_latency(lambda: ray.get(ray_tree.remote(3, 3)), 20) * 1e3,
            "call_ms": median_latency(call, args.rounds) * 1e3,
            "call_driver_cpu_ms": driver_cpu(call, args.rounds) * 1e3,
            "calls_in_flight_per_s": throughput(
                lambda n: ray.get([echo.ping.remote(i) for i in range(n)]), args.tasks
            ),
            "async_actor_calls_in_flight_per_s": throughput(
                lambda n: ray.get([async_echo.ping.remote(i) for i in range(n)]), args.tasks
            ),
        }
    finally:
        ray.shutdown()


MEASURE = {
    "hrl_tasks": measure_hrl_tasks,
    "hrl_tasks_dask_route": lambda args: measure_hrl_tasks(args, route="dask"),
    "dask": measure_dask,
    "ray": measure_ray,
    "hrl_tasks_tls": measure_hrl_tasks_tls,
}


def run_one(system: str, args) -> dict:
    """One system's figures, from a subprocess of its own."""
    command = [sys.executable, __file__, "--only", system, "--tasks", str(args.tasks),
               "--rounds", str(args.rounds), "--workers", str(args.workers)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def versions() -> dict:
    found = {}
    for name in ("distributed", "ray"):
        if importlib.util.find_spec(name) is not None:
            found[name] = __import__(name).__version__
    return found


def median_of(values):
    """The median of the numbers among ``values``; an error's text if one was all there was."""
    values = list(values)
    numbers = [v for v in values if isinstance(v, (int, float))]
    if numbers:
        return round(statistics.median(numbers), 3)
    return next((v for v in values if v is not None), None)


def ratio(a, b):
    numbers = all(isinstance(v, (int, float)) for v in (a, b))
    return round(a / b, 3) if numbers else None


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per throughput batch")
    parser.add_argument("--rounds", type=int, default=200, help="round trips per latency figure")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--system-rounds", type=int, default=3, help="rounds over the systems")
    parser.add_argument("--systems", nargs="*", default=list(SYSTEMS[:4]), choices=SYSTEMS)
    parser.add_argument("--only", choices=SYSTEMS, help=argparse.SUPPRESS)  # one subprocess
    args = parser.parse_args()
    if args.only:
        print(json.dumps(MEASURE[args.only](args)))
        return

    systems = [s for s in args.systems if s != "ray" or importlib.util.find_spec("ray")]
    runs = {system: [] for system in systems}
    for round_ in range(args.system_rounds):
        for i in range(len(systems)):
            system = systems[(round_ + i) % len(systems)]
            runs[system].append(run_one(system, args))
            print(json.dumps({system: runs[system][-1]}), file=sys.stderr, flush=True)
    figures = {
        system: {metric: median_of(r.get(metric) for r in results) for metric in results[0]}
        for system, results in runs.items()
    }
    engine, _, dask, ray, tls = (figures.get(s, {}) for s in SYSTEMS)
    print(json.dumps({
        "bench": "engine_overhead",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "versions": versions(),
        "workers": args.workers,
        "system_rounds": args.system_rounds,
        "figures": figures,
        "latency_vs_dask": ratio(engine.get("task_ms"), dask.get("task_ms")),
        "map_vs_dask": ratio(engine.get("map_tasks_per_s"), dask.get("map_tasks_per_s")),
        "latency_vs_ray": ratio(engine.get("task_ms"), ray.get("task_ms")),
        "map_vs_ray": ratio(engine.get("map_tasks_per_s"), ray.get("map_tasks_per_s")),
        "tree_vs_ray": ratio(engine.get("tree_ms"), ray.get("tree_ms")),
        "call_vs_ray": ratio(engine.get("call_ms"), ray.get("call_ms")),
        "tls_latency_vs_tcp": ratio(tls.get("task_ms"), engine.get("task_ms")),
        "calls_in_flight_vs_ray_async": ratio(
            engine.get("calls_in_flight_per_s"), ray.get("async_actor_calls_in_flight_per_s")
        ),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
