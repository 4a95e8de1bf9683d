"""Time to recover from a lost host: PPO across emulated hosts, one host lost mid-run.

A scheduler on one emulated host and one ``dask worker`` (2 threads) on each of
``--hosts`` others (`tests/hosts.py`, network namespaces, as root); the driver in
the root namespace trains PPO on CartPole-v1 with one rollout worker per host.
At iteration ``--at`` a worker host is lost, in one of two ways:

* ``kill``: every process on it killed, then its link taken down (a machine dies);
* ``partition``: its link down, its processes alive (a switch fails), with the
  scheduler's ``distributed.scheduler.worker-ttl`` at ``--ttl`` seconds.

The run goes on for ``--ttl`` + 25 s of training, well past the loss and the
scheduler's dropping of the host.

Printed, one JSON line per way: the median iteration's wall time before the loss
and the pace the run settles at without the host, and the time lost to the loss
(`time_lost`): the iterations after it less as many at that pace. ``--runs`` repeats.

    python bench/host_loss.py [--ways kill partition] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hrl_tasks as hrl  # noqa: E402
from tests.hosts import HostCluster, Hosts, connect, missing  # noqa: E402

AFTER_TTL_S = 15.0  # the run goes on this long after the scheduler should drop the host


def one_run(way: str, n_hosts: int, at: int, ttl: float) -> dict:
    run_s = 10.0 + ttl + AFTER_TTL_S  # well past the loss and the ttl
    if way == "partition":
        os.environ["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] = f"{ttl}s"  # the scheduler's
    try:
        with Hosts(n_hosts + 1) as hosts:
            cluster = HostCluster(hosts, None, threads=2)
            engine = connect(cluster, n_hosts, timeout=120)
            lost = cluster.worker_hosts[0]
            stamps: list[float] = []

            def lose(result):
                stamps.append(time.monotonic())
                if result["iteration"] == at:
                    (hosts.kill if way == "kill" else hosts.partition)(lost)

            try:
                start = time.monotonic()
                algo, result = hrl.train(
                    "ppo",
                    env="CartPole-v1",
                    engine=engine,
                    callback=lose,
                    stop={"time_total_s": run_s},
                    num_workers=n_hosts,
                )
                algo.stop()
            finally:
                engine.close()
    finally:
        os.environ.pop("DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL", None)
    walls = [b - a for a, b in zip([start, *stamps], stamps, strict=False)]
    return {
        "way": way,
        "iterations": len(walls),
        **time_lost(walls, at),
        "iterations_walls_s": [round(w, 3) for w in walls],
        "reached_iteration": result["iteration"],
    }


def time_lost(walls: list[float], at: int) -> dict:
    """What the loss after iteration ``at`` cost: the wall time of the iterations
    after it less as many at the pace the run settles at without the host (the mean
    of its last third, periodic slow iterations included as before; the final one,
    which also stops the run, left out)."""
    before = statistics.mean(walls[1:at])  # the first iteration builds the workers
    after = walls[at:-1]
    settled = after[-max(1, len(after) // 3) :]
    pace = statistics.mean(settled)
    return {
        "mean_iteration_before_s": round(before, 4),
        "mean_iteration_without_the_host_s": round(pace, 4),
        "iterations_after": len(after),
        "time_lost_s": round(sum(after) - len(after) * pace, 2),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ways", nargs="+", default=["kill", "partition"],
                        choices=["kill", "partition"])  # fmt: skip
    parser.add_argument("--hosts", type=int, default=3, help="worker hosts")
    parser.add_argument("--at", type=int, default=5, help="the iteration after which one is lost")
    parser.add_argument("--ttl", type=float, default=15.0, help="worker-ttl for a partition, s")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    problem = missing()
    if problem:
        raise SystemExit(f"needs network namespaces: {problem}")
    for _ in range(args.runs):
        for way in args.ways:
            row = one_run(way, args.hosts, args.at, args.ttl)
            row.update(bench="host_loss", date=time.strftime("%Y-%m-%d"), hosts=args.hosts,
                       ttl_s=args.ttl if way == "partition" else None,
                       machine=f"{platform.machine()}, {os.cpu_count()} cores")  # fmt: skip
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
