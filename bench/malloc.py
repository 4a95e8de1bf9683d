"""IMPALA's sampling rate with its rollout workers mapping blocks from 16 KiB against glibc's 128 KiB.

Rollout worker processes have glibc map blocks of 16 KiB and more on their own
(``hrl_tasks.rollout.malloc``), which stops the heap growth under their messages'
buffers (docs/benchmarks.md, memory soak); this measures what it costs. Each side
runs in a fresh process: IMPALA with its default config on CartPole-v1 (2 rollout
workers x 4 envs), ``train()`` for 5 s to warm up, then for ``--seconds``; env
steps sampled per second. On the ``glibc_128k`` side the workers' threshold is
set back to 128 KiB (what Dask's workers had before) once the algorithm is
built; on ``rollout_16k`` it stays as the workers set it. Sides alternate for
``--rounds`` rounds; the ratio is the median of the rounds' 16 KiB / 128 KiB ratios.

    python bench/malloc.py [--rounds 3] [--seconds 15]

Prints one JSON line.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

SIDES = {"glibc_128k": 131072, "rollout_16k": None}


def one_run(seconds: float, threshold: int | None) -> dict:
    import hrl_tasks
    from hrl_tasks.algorithms import IMPALA
    from hrl_tasks.rollout.malloc import map_blocks_from

    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = IMPALA({}, engine=engine)
        set_back = threshold and engine.client.run(map_blocks_from, threshold)
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
    return {"env_steps_per_s": round(rate), "set_back": set_back or None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--one", choices=list(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.seconds, SIDES[args.one])))
        return
    rounds = []
    for _ in range(args.rounds):
        found = {}
        for side in SIDES:
            run = subprocess.run(
                [sys.executable, __file__, "--one", side, "--seconds", str(args.seconds)],
                capture_output=True, text=True, timeout=600, check=True,
            )  # fmt: skip
            found[side] = json.loads(run.stdout.strip().splitlines()[-1])
        ratio = found["rollout_16k"]["env_steps_per_s"] / found["glibc_128k"]["env_steps_per_s"]
        rounds.append({**found, "ratio": round(ratio, 3)})
    print(json.dumps({
        "bench": "malloc", "date": time.strftime("%Y-%m-%d"), "rounds": rounds,
        "ratio_16k_over_128k": statistics.median(r["ratio"] for r in rounds),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
