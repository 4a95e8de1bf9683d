"""Rainbow against DQN on CartPole-v1: env steps to a mean return of 450, per seed.

Runs ``dqn-cartpole`` and ``rainbow-cartpole`` of bench/learning.py (the project's
DQN defaults, and the same rounds with every part of Rainbow on), seed by seed,
interleaved (DQN seed 0, Rainbow seed 0, DQN seed 1, ...), on the embedded cluster.
A run that does not reach the threshold within its budget counts as its budget, and
is marked so. Prints one JSON line: every run, the median env steps of each, and
their ratio (Rainbow / DQN; issue 57's target is at most 0.7 over 5 seeds).

    python bench/rainbow.py [--seeds 0 1 2 3 4] [--out runs/bench-rainbow]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import RUNS, run  # noqa: E402

PAIR = ("dqn-cartpole", "rainbow-cartpole")


def steps_to_threshold(result: dict) -> int:
    """Env steps a run took to its threshold; its budget if it never got there."""
    return result["env_steps"] if result["solved"] else result["budget"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-rainbow"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {name: [] for name in PAIR}
    for seed in args.seeds:
        for name in PAIR:
            found = run(name, RUNS[name], seed, args.out / f"seed-{seed}")
            results[name].append({"seed": seed, **found})
            print(json.dumps({"seed": seed, **found}), file=sys.stderr, flush=True)
    medians = {
        name: statistics.median(steps_to_threshold(r) for r in rows)
        for name, rows in results.items()
    }
    print(
        json.dumps(
            {
                "bench": "rainbow",
                "date": time.strftime("%Y-%m-%d"),
                "seeds": args.seeds,
                "median_env_steps": medians,
                "rainbow_over_dqn": round(medians[PAIR[1]] / medians[PAIR[0]], 3),
                "solved": {name: sum(r["solved"] for r in rows) for name, rows in results.items()},
                "runs": results,
            }
        )
    )


if __name__ == "__main__":
    main()
