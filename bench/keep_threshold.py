"""Where a direct-route result should stay on its worker: sent back or kept, by size.

For each size, a task returns a numpy array of that many bytes; timed are its
``result()`` in the driver and a chain (the array into a second task, then that
task's ``result()``), with every result sent back in the answer (inline) and
then with every result kept on its worker (the worker's ``keep_from`` set to
0). ``Engine.local(2 workers, 1 thread)``; medians of ``--reps``. The engine's
``KEEP_FROM_BYTES`` should sit where keeping starts to win (docs/engine.md).
Prints one JSON line.

    python bench/keep_threshold.py [--reps 15]
"""

import argparse
import json
import platform
import statistics
import time

import numpy as np

import hrl_tasks as hrl

SIZES = (16_000, 64_000, 256_000, 1_000_000, 4_000_000)


def make(nbytes):
    return np.ones(nbytes // 8)


def length(array):
    return len(array)


def set_keep_from(nbytes, dask_worker):
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    WorkerRuntime.of(dask_worker).task_service.keep_from = nbytes


def timed(call, reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="round trips per figure")
    args = parser.parse_args()
    figures = {}
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        engine.gather([engine.submit(make, 8) for _ in range(10)])  # the workers import it
        for size in SIZES:
            for mode, keep_from in (("inline", 10**12), ("kept", 0)):
                engine.client.run(set_keep_from, keep_from)
                figures[f"{size}_{mode}_result_ms"] = timed(
                    lambda s=size: engine.submit(make, s).result(), args.reps
                )
                figures[f"{size}_{mode}_chain_ms"] = timed(
                    lambda s=size: engine.submit(length, engine.submit(make, s)).result(),
                    args.reps,
                )
    print(json.dumps({
        "bench": "keep_threshold", "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "reps": args.reps, "figures": figures,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
