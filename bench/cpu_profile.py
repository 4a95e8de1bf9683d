"""Where an algorithm's CPU goes, process by process: py-spy over a window of training.

Builds the algorithm on its own embedded cluster (``bench/throughput.py``'s settings:
8 envs per worker, a 64x64 MLP, other keys at their defaults unless ``--set``), warms
it up, then trains for ``--seconds`` while py-spy samples the driver and every worker
process (``--idle`` excluded: only samples on a CPU count). Prints, per process, its
CPU seconds over the window and the functions where its samples were, as a share of
that process's samples, inclusive (``--top`` of them), then one JSON line with the same.
Needs ``py-spy`` (``pip install py-spy``; root, or ptrace allowed).

    python bench/cpu_profile.py impala [--workers 2] [--seconds 10] [--set KEY=VALUE ...]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

from hrl_tasks.algorithms import ALGORITHMS

from throughput import CONFIGS, ENV, cpu_breakdown, cpu_snapshot, warm_up  # isort: skip


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


IDLE = ("EpollSelector.select", "Condition.wait", "Event.wait", "_queue.SimpleQueue.get",
        "Queue.get", "sleep", "Thread.join")  # fmt: skip


def summarize(path: str, top: int) -> dict:
    """A py-spy raw (collapsed) file as ``{samples, functions: {frame: share}}``: each
    function's share of the samples whose stack holds it (inclusive, once per stack),
    stacks that wait (`IDLE`, py-spy cannot always tell) left out."""
    total, inclusive = 0, collections.Counter()
    with open(path) as lines:
        for line in lines:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            n = int(count)
            leaf = stack.rsplit(";", 1)[-1]
            if any(leaf.startswith(name) for name in IDLE):
                continue
            total += n
            frames = {frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].rstrip(")")
                      for frame in stack.split(";") if not frame.startswith("process ")}  # fmt: skip
            for frame in frames:
                inclusive[frame] += n
    return {
        "samples": total,
        "functions": {f: round(n / total, 3) for f, n in inclusive.most_common(top)}
        if total
        else {},
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("algorithm", choices=sorted(CONFIGS))
    parser.add_argument("--workers", type=int, default=2, help="rollout workers")
    parser.add_argument("--seconds", type=float, default=10.0, help="the profiled window")
    parser.add_argument("--top", type=int, default=25, help="functions listed per process")
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = {k: parse_value(v) for k, _, v in (s.partition("=") for s in args.set)}
    config = {**CONFIGS[args.algorithm], **overrides}
    algo = ALGORITHMS[args.algorithm](env=ENV, seed=0, num_workers=args.workers, **config)
    out: dict = {"bench": "profile", "algorithm": args.algorithm, "workers": args.workers,
                 "seconds": args.seconds, "overrides": overrides, "processes": {}}  # fmt: skip
    try:
        first = warm_up(algo)
        pids = {"driver": os.getpid()}
        for address, pid in algo.engine.client.run(os.getpid).items():
            pids[address] = pid
        names = {}
        for handle in [
            *algo.workers.remote_workers,
            getattr(algo.workers.learner_group, "handle", None),
        ]:
            if handle is not None:
                names.setdefault(handle.address, []).append(handle.name)
        with tempfile.TemporaryDirectory() as tmp:
            spies = {
                who: subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        str(pid),
                        "--duration",
                        str(int(args.seconds)),
                        "--rate",
                        str(args.rate),
                        "--format",
                        "raw",
                        "--nonblocking",
                        "--output",
                        os.path.join(tmp, f"{pid}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                for who, pid in pids.items()
            }
            cpu_before = {
                who: sum(psutil.Process(pid).cpu_times()[:2]) for who, pid in pids.items()
            }
            threads_before = cpu_snapshot()
            start = time.perf_counter()
            result = first
            while any(spy.poll() is None for spy in spies.values()):
                result = algo.train()
            elapsed = time.perf_counter() - start
            cpu_after = {who: sum(psutil.Process(pid).cpu_times()[:2]) for who, pid in pids.items()}
            out["driver_threads"] = cpu_breakdown(threads_before, cpu_snapshot())[
                "driver_threads_cpu_s"
            ]
            for who, pid in pids.items():
                summary = summarize(os.path.join(tmp, f"{pid}.txt"), args.top)
                out["processes"][who] = {
                    "holds": names.get(
                        who, ["driver, and the embedded scheduler"] if who == "driver" else []
                    ),
                    "cpu_s": round(cpu_after[who] - cpu_before[who], 2),
                    **summary,
                }
        out["wall_s"] = round(elapsed, 2)
        out["env_steps_sampled_per_s"] = round(
            (result["env_steps_sampled"] - first["env_steps_sampled"]) / elapsed
        )
        out["env_steps_trained_per_s"] = round(
            (result["env_steps_trained"] - first["env_steps_trained"]) / elapsed
        )
    finally:
        algo.stop()
    for who, proc in out["processes"].items():
        print(
            f"\n{who} {proc['holds']}: {proc['cpu_s']} CPU-s, {proc['samples']} samples",
            file=sys.stderr,
        )
        for function, share in proc["functions"].items():
            print(f"  {share:6.1%}  {function}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
