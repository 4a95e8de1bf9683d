"""IMPALA's sampling rate with glibc's mmap threshold at 64 KiB against its default 128 KiB.

``MALLOC_MMAP_THRESHOLD_=65536`` stops the heap fragmentation behind IMPALA's memory
growth (docs/benchmarks.md, memory soak); this measures what it costs. Each side runs
in a fresh process with the setting in its environment (the embedded cluster's
workers inherit it; each run checks what they got): IMPALA with 2 rollout workers x
8 envs on CartPole-v1, ``train()`` for 5 s to warm up, then for ``--seconds``; env
steps sampled per second. Sides alternate for ``--rounds`` rounds; the ratio is the
median of the rounds' 64 KiB / 128 KiB ratios.

    python bench/malloc.py [--rounds 3] [--seconds 15]

Prints one JSON line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIDES = {"default_128k": "131072", "mapped_64k": "65536"}


def one_run(seconds: float) -> dict:
    import hrl_tasks
    from hrl_tasks.algorithms import IMPALA

    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        found = sorted(set(engine.client.run(os.getenv, "MALLOC_MMAP_THRESHOLD_").values()))
        algo = IMPALA({"num_workers": 2, "num_envs_per_worker": 8}, engine=engine)
        try:
            warm = time.monotonic() + 5
            while time.monotonic() < warm:
                result = algo.train()
            steps, start = result["env_steps_sampled"], time.monotonic()
            while time.monotonic() - start < seconds:
                result = algo.train()
            rate = (result["env_steps_sampled"] - steps) / (time.monotonic() - start)
        finally:
            algo.stop()
    return {"env_steps_per_s": round(rate), "workers_threshold": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.seconds)))
        return
    rounds = []
    for _ in range(args.rounds):
        found = {}
        for side, value in SIDES.items():
            run = subprocess.run(
                [sys.executable, __file__, "--one", "--seconds", str(args.seconds)],
                env={**os.environ, "MALLOC_MMAP_THRESHOLD_": value},
                capture_output=True, text=True, timeout=600, check=True,
            )  # fmt: skip
            found[side] = json.loads(run.stdout.strip().splitlines()[-1])
        ratio = found["mapped_64k"]["env_steps_per_s"] / found["default_128k"]["env_steps_per_s"]
        rounds.append({**found, "ratio": round(ratio, 3)})
    print(json.dumps({
        "bench": "malloc", "date": time.strftime("%Y-%m-%d"), "rounds": rounds,
        "ratio_64k_over_128k": statistics.median(r["ratio"] for r in rounds),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
