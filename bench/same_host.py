"""A sample batch between two worker processes on one host: the engine's route
(a kept direct call, fetched worker to worker) against shared memory.

Two stateful workers on the embedded cluster: a producer makes a SampleBatch of
Ape-X's columns (``--rows`` rows, a float32 observation of 4), a consumer takes it.
The engine's route: the producer's ``batch`` call is kept on its worker and the
consumer's ``take`` call is given its TaskRef, so the consumer's worker fetches
the batch from the producer's (encoded once, decoded as views of the bytes).
Shared memory: the producer copies the columns into a new
`multiprocessing.shared_memory` segment and returns its name and layout (a few
hundred bytes, through the driver), and the consumer maps it, reads the columns
in place, and closes and unlinks it. Both then copy the rows into a buffer of
their own, as a replay shard does. Each way makes the same two calls per batch,
one batch at a time, alternating in rounds; the figures are the median
milliseconds per batch (wall) and CPU milliseconds per batch of each worker
process. Prints one JSON line; ``shm_over_route`` < 1 means shared memory is faster.

    python bench/same_host.py [--rows 512 16384] [--batches 300] [--rounds 3]
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import hrl_tasks as hrl
from hrl_tasks.data import SampleBatch

COLUMNS = {  # name: (shape per row, dtype), as Ape-X's sampled rows
    "obs": ((4,), np.float32),
    "next_obs": ((4,), np.float32),
    "actions": ((), np.int64),
    "rewards": ((), np.float32),
    "terminateds": ((), np.bool_),
    "truncateds": ((), np.bool_),
    "n_step_discounts": ((), np.float32),
    "eps_id": ((), np.int64),
}


def make_batch(rows: int, seed: int) -> SampleBatch:
    rng = np.random.default_rng(seed)
    return SampleBatch(
        {
            name: (rng.random((rows, *shape)) * 10).astype(dtype)
            for name, (shape, dtype) in COLUMNS.items()
        }
    )


class Producer:
    def __init__(self, rows: int):
        self.rows = rows
        self.made = 0

    def batch(self) -> SampleBatch:
        self.made += 1
        return make_batch(self.rows, self.made)

    def batch_in_shared_memory(self) -> dict:
        from multiprocessing import resource_tracker, shared_memory

        batch = self.batch()
        layout, total = [], 0
        for name in batch:
            array = np.ascontiguousarray(batch[name])
            layout.append((name, array.dtype.str, array.shape, total))
            total += array.nbytes
        segment = shared_memory.SharedMemory(create=True, size=max(1, total))
        for name, _, _, offset in layout:
            raw = np.ascontiguousarray(batch[name]).view(np.uint8).reshape(-1)
            segment.buf[offset : offset + raw.nbytes] = raw
        segment.close()
        # The consumer unlinks it (POSIX names: "/" and the name).
        resource_tracker.unregister("/" + segment.name, "shared_memory")
        return {"name": segment.name, "layout": layout}

    def cpu(self) -> float:
        return time.process_time()


class Consumer:
    def __init__(self, rows: int):
        self.store = {n: np.zeros((rows, *s), d) for n, (s, d) in COLUMNS.items()}
        self.taken = 0

    def _keep(self, columns) -> None:
        for name, array in columns.items():
            self.store[name][...] = array
        self.taken += 1

    def take(self, batch: SampleBatch) -> int:
        self._keep({name: batch[name] for name in batch})
        return self.taken

    def take_from_shared_memory(self, described: dict) -> int:
        from multiprocessing import shared_memory

        segment = shared_memory.SharedMemory(name=described["name"])
        try:
            columns = {
                name: np.ndarray(shape, np.dtype(dtype), buffer=segment.buf, offset=offset)
                for name, dtype, shape, offset in described["layout"]
            }
            self._keep(columns)
            del columns
        finally:
            segment.close()
            segment.unlink()
        return self.taken

    def cpu(self) -> float:
        return time.process_time()


def one_way(producer, consumer, batches: int, shared: bool) -> dict:
    cpu = [h.call("cpu", direct=True).result() for h in (producer, consumer)]
    start = time.perf_counter()
    for _ in range(batches):
        if shared:
            described = producer.call("batch_in_shared_memory", direct=True).result()
            consumer.call("take_from_shared_memory", described, direct=True).result()
        else:
            kept = producer.call("batch", direct=True, keep=True)
            consumer.call("take", kept, direct=True).result()
    wall = time.perf_counter() - start
    after = [h.call("cpu", direct=True).result() for h in (producer, consumer)]
    per = 1000.0 / batches
    return {
        "ms": round(wall * per, 3),
        "producer_cpu_ms": round((after[0] - cpu[0]) * per, 3),
        "consumer_cpu_ms": round((after[1] - cpu[1]) * per, 3),
    }


def measure(engine, rows: int, batches: int, rounds: int) -> dict:
    producer = engine.create_worker(Producer, rows, name="Producer", strategy="spread")
    consumer = engine.create_worker(Consumer, rows, name="Consumer", strategy="spread")
    try:
        assert producer.address != consumer.address, "the two must be in different processes"
        one_way(producer, consumer, 20, False), one_way(producer, consumer, 20, True)  # warm
        runs = {"route": [], "shared_memory": []}
        for _ in range(rounds):
            runs["route"].append(one_way(producer, consumer, batches, False))
            runs["shared_memory"].append(one_way(producer, consumer, batches, True))
    finally:
        producer.kill(), consumer.kill()
    sample = make_batch(rows, 0)
    medians = {
        way: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for way, results in runs.items()
    }
    return {
        "rows": rows,
        "bytes": sum(sample[name].nbytes for name in sample),
        **medians,
        "shm_over_route": round(medians["shared_memory"]["ms"] / medians["route"]["ms"], 3),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", nargs="+", type=int, default=[512, 16384], help="rows per batch")
    parser.add_argument("--batches", type=int, default=300, help="batches per round and way")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the two ways alternating")
    args = parser.parse_args()
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        sizes = [measure(engine, rows, args.batches, args.rounds) for rows in args.rows]
    print(
        json.dumps(
            {
                "bench": "same_host",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "sizes": sizes,
            }
        )
    )


if __name__ == "__main__":
    main()
