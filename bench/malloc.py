"""IMPALA's sampling rate with its rollout workers' glibc settings against glibc's own.

Rollout worker processes have glibc map blocks of 16 KiB and more on their own, and
keep two malloc arenas (``hrl_tasks.rollout.malloc``), which stops the growth under
their messages' buffers and their threads (docs/benchmarks.md, memory soak); this
measures what each costs. Each side runs in a fresh process: IMPALA with its default
config on CartPole-v1 (2 rollout workers x 4 envs), ``train()`` for 5 s to warm up,
then for ``--seconds``; env steps sampled per second. Sides:

- ``rollout``: the workers as they set themselves (16 KiB, two arenas);
- ``glibc_128k``: the threshold set back to 128 KiB (what Dask's workers had
  before) once the algorithm is built;
- ``glibc_arenas``: ``MALLOC_ARENA_MAX=16`` in the environment (glibc's own limit
  on two cores, which the workers then leave alone).

Sides alternate for ``--rounds`` rounds, their order rotated each round; each ratio
is the median of the rounds' ``rollout`` / that side.

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

# side -> (the workers' threshold set back to, environment added)
SIDES = {
    "glibc_128k": (131072, {}),
    "rollout": (None, {}),
    "glibc_arenas": (None, {"MALLOC_ARENA_MAX": "16"}),
}


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
        print(json.dumps(one_run(args.seconds, SIDES[args.one][0])))
        return
    rounds = []
    for k in range(args.rounds):
        found = {}
        order = list(SIDES)[k % len(SIDES) :] + list(SIDES)[: k % len(SIDES)]  # rotated
        for side in order:
            run = subprocess.run(
                [sys.executable, __file__, "--one", side, "--seconds", str(args.seconds)],
                capture_output=True, text=True, timeout=600, check=True,
                env={**os.environ, **SIDES[side][1]},
            )  # fmt: skip
            found[side] = json.loads(run.stdout.strip().splitlines()[-1])
        rate = {side: found[side]["env_steps_per_s"] for side in SIDES}
        ratios = {f"rollout_over_{side}": round(rate["rollout"] / rate[side], 3)
                  for side in ("glibc_128k", "glibc_arenas")}  # fmt: skip
        rounds.append({**found, **ratios})
    print(json.dumps({
        "bench": "malloc", "date": time.strftime("%Y-%m-%d"), "rounds": rounds,
        **{key: statistics.median(r[key] for r in rounds) for key in ratios},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
