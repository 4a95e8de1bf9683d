"""Start-up as a user waits for it: whole processes, timed from outside, against
Stable-Baselines3 in the same run.

Interleaved, ``--reps`` times each (the machine's speed drifts):

* ``sb3``: a process that imports Stable-Baselines3 and builds its
  ``PPO("MlpPolicy", "CartPole-v1")`` (torch at one thread), the baseline;
* ``train``: ``hrl-tasks train ppo --env CartPole-v1 --stop-iters 1``, exit included;
* ``help``: ``hrl-tasks --help``; ``usage``: ``hrl-tasks train ppx`` (a usage error).

With ``--solve``, also the whole ``hrl-tasks train ppo --env CartPole-v1
--stop-reward 450`` process (its defaults) against whole Stable-Baselines3 processes
with the rl-zoo settings of ``bench/ppo_cartpole.py`` until the same target, seed by
seed, the libraries alternating; Stable-Baselines3 runs at each of ``--sb3-threads``
torch threads (default 1 and 2) and its faster run of the seed is the baseline.

Targets (issue 53): train ≤ 0.8x sb3 (medians of 8 interleaved reps); help and usage
≤ 0.2x sb3; solve ≤ 0.6x (median of the per-seed ratios over 6 seeds). Prints one
JSON line.

    python bench/startup.py --reps 8 [--solve --seeds 0 1 2 3 4 5] [--phases]

``--phases`` also times the phases of a one-iteration run inside one process
(imports, the embedded cluster, the rollout workers, iterations, checkpoint,
the curve, closing), to show where the start-up goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SB3_BUILD = (
    "import torch; torch.set_num_threads(1)\n"
    "from stable_baselines3 import PPO\n"
    "PPO('MlpPolicy', 'CartPole-v1')\n"
)
SB3_SOLVE = """
import sys, torch
torch.set_num_threads({threads})
sys.path.insert(0, {bench!r})
from ppo_cartpole import sb3_time_to_solve
sb3_time_to_solve({seed}, {budget})
"""
CLI = [sys.executable, "-m", "hrl_tasks.cli"]
PHASES = """
import json, time
t = [("start", time.perf_counter())]
def mark(name):
    t.append((name, time.perf_counter()))
from hrl_tasks.algorithms import PPO
mark("import algorithms (torch)")
from hrl_tasks import Engine
engine = Engine.local(n_workers=2, threads_per_worker=1)
mark("Engine.local")
algo = PPO({{"env": "CartPole-v1"}}, engine=engine)
mark("build PPO (rollout workers)")
algo.train()
mark("first iteration")
algo.train()
mark("second iteration")
algo.save({path!r})
mark("checkpoint")
from hrl_tasks.plotting import plot_learning_curve
plot_learning_curve({{"ppo": []}}, {png!r})
mark("matplotlib and the curve")
algo.stop()
engine.close()
mark("close")
print(json.dumps({{b[0]: round(b[1] - a[1], 2) for a, b in zip(t, t[1:])}}))
"""


def timed(command: list[str], cwd: str, expected: int = 0) -> float:
    """Wall seconds of a whole process; raises if it does not exit ``expected`` (a usage
    error exits 2)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if done.returncode != expected:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def solve_commands(seed: int, args, work: str, bench: str) -> dict:
    """The processes of one seed's solve: ``"ours"``, and Stable-Baselines3 at each of
    ``args.sb3_threads`` torch threads (keyed by the count)."""
    ours = ["train", "ppo", "--env", "CartPole-v1", "--stop-reward", "450", "--no-progress"]
    out = os.path.join(work, f"solve-{seed}")
    runs = {
        "ours": [*CLI, *ours, "--stop-steps", str(args.budget), "--seed", str(seed), "--out", out]
    }
    for threads in args.sb3_threads:
        code = SB3_SOLVE.format(bench=bench, seed=seed, budget=args.budget, threads=threads)
        runs[threads] = [sys.executable, "-c", code]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--solve", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--budget", type=int, default=300_000)
    parser.add_argument("--sb3-threads", type=int, nargs="+", default=[1, 2],
                        help="torch threads of Stable-Baselines3's solve runs; the faster counts")  # fmt: skip
    parser.add_argument("--phases", action="store_true",
                        help="also time the phases of a one-iteration run inside one process")  # fmt: skip
    args = parser.parse_args()
    bench = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as work:
        commands = {
            "sb3": [sys.executable, "-c", SB3_BUILD],
            "train": [*CLI, "train", "ppo", "--env", "CartPole-v1", "--stop-iters", "1",
                      "--no-progress"],  # each run in its own runs/ppo-CartPole-v1-N
            "help": [*CLI, "--help"],
            "usage": [*CLI, "train", "ppx"],
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in commands}
        for rep in range(args.reps):
            names = list(commands)
            names = names[rep % len(names) :] + names[: rep % len(names)]  # rotate the order
            for name in names:
                times[name].append(timed(commands[name], work, 2 if name == "usage" else 0))
        medians = {name: statistics.median(values) for name, values in times.items()}
        result = {
            "bench": "startup",
            "reps": args.reps,
            **{f"{name}_s": round(value, 2) for name, value in medians.items()},
            **{f"{name}_ratio": round(medians[name] / medians["sb3"], 2)
               for name in ("train", "help", "usage")},
        }  # fmt: skip
        if args.solve:
            ratios, pairs = [], []
            for index, seed in enumerate(args.seeds):
                runs = solve_commands(seed, args, work, bench)
                names = list(runs)
                names = names[index % len(names) :] + names[: index % len(names)]  # rotate
                seconds = {name: timed(runs[name], work) for name in names}
                ours = seconds.pop("ours")
                theirs = {threads: seconds[threads] for threads in args.sb3_threads}
                ratios.append(ours / min(theirs.values()))
                pairs.append([round(ours, 1), {t: round(v, 1) for t, v in theirs.items()}])
            result.update(solve_ratio_median=round(statistics.median(ratios), 2),
                          solve_ratios=[round(r, 2) for r in ratios],
                          solve_seconds_per_seed=pairs)  # fmt: skip
        if args.phases:
            code = PHASES.format(path=os.path.join(work, "p.hrl"), png=os.path.join(work, "p.png"))
            done = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True,
                                  text=True, timeout=300)  # fmt: skip
            result["phases_s"] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
