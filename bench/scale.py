"""The engine's cost as rollout workers grow: 2 to 32, embedded and on separate processes.

Each rollout worker's env sleeps instead of computing (`SleepEnv`, ``--sleep-ms``
a step), so the two cores are not the limit, and samples a fixed fragment per
iteration, so the batch grows with the workers (as in RLlib). One PPO-style
iteration is one broadcast of new weights (`WorkerSet.sync_weights`, the
learner's update left out) and one sample call per worker, gathered; its remote
workers act with the policy's numpy copy through direct calls, as PPO's do. As
in PPO's plan (``sync_weights(defer=True)``), the weights ride on each worker's
sample call; ``--separate-sync`` sends them in a call of their own first.

Three clusters per worker count: the embedded one (`Engine.local`: its scheduler
and nannies run in the driver's process); separate ``dask scheduler`` and
``dask worker --nworkers N`` processes reached with `Engine.connect`; and
``hosts``: ``--hosts`` emulated hosts (network namespaces, `tests/hosts.py`, as
root), the scheduler on one more, each host a ``dask worker --nworkers N/hosts``,
the driver in the root namespace reaching them by address. Per
iteration, over ``--iterations`` after a warm-up (CPU and bytes: means; times:
medians):

* ``driver_cpu_ms``: the driver process's CPU (embedded: its scheduler included);
* ``driver_main_cpu_ms``: the thread that runs the iteration (the flow);
* ``scheduler_cpu_ms``: the separate scheduler process (None when embedded);
* ``driver_sent_kb``: bytes the driver process handed to its sockets (embedded:
  the scheduler's and nannies' messages included), beside ``weights_kb``;
* ``beyond_slowest_ms``: the iteration's wall time less the slowest sample call's
  own time, measured inside each worker;
* ``relayed_rounds``: messages per iteration that carried a host's calls together
  (`hrl_tasks.scheduler.relay`; ``--no-relay`` sends each call on its own).

Targets (issue 18): bytes sent per weight update constant as workers grow (one
broadcast); driver CPU per iteration with 32 workers at most 3x that with 2.
Issue 55: on the emulated hosts, 4 hosts x 8 workers at most 1.25x 4 x 1; on the
embedded cluster, 32 workers at most 2x 2.
Prints one JSON line; ``--plot PATH`` draws each figure against the worker count.

    python bench/scale.py [--workers 2 4 8 16 32] [--iterations 30] [--plot docs/images/scale.png]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import gymnasium as gym
import numpy as np
import psutil

import hrl_tasks as hrl
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import WorkerSet

FRAGMENT = 50  # steps per sample call (one env per worker)


class SleepEnv(gym.Env):
    """CartPole's spaces; each step sleeps ``sleep_s`` and returns a random observation;
    episodes of 200 steps. Defined in the script, so it travels by value to the workers."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, sleep_s: float = 0.002):
        self.sleep_s, self.t = sleep_s, 0
        self.rng = np.random.default_rng(0)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self.rng.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        time.sleep(self.sleep_s)
        self.t += 1
        obs = self.rng.uniform(-1, 1, 4).astype(np.float32)
        return obs, 1.0, False, self.t >= 200, {}


def sleep_env(sleep_s: float):
    return lambda env_config=None: SleepEnv(sleep_s)


class SocketBytes:
    """Bytes this process's tornado streams (Dask's TCP comms) hand to their sockets,
    counted by wrapping ``IOStream.write_to_fd`` (measurement only)."""

    def __init__(self):
        from tornado.iostream import IOStream

        self.total = 0
        original = IOStream.write_to_fd

        def write_to_fd(stream, data):
            sent = original(stream, data)
            self.total += sent
            return sent

        IOStream.write_to_fd = write_to_fd


class BridgeBytes:
    """Bytes the root namespace (the driver, alone there) sent into the emulated hosts'
    bridge: its device's transmit counter."""

    def __init__(self, bridge: str):
        self.path = f"/sys/class/net/{bridge}/statistics/tx_bytes"

    @property
    def total(self) -> int:
        with open(self.path) as f:
            return int(f.read())


def thread_cpu(thread_id: int) -> float:
    """CPU seconds of one thread of this process (clock ticks: sum many iterations)."""
    for t in psutil.Process().threads():
        if t.id == thread_id:
            return t.user_time + t.system_time
    return 0.0


def measure(
    engine,
    n,
    iterations,
    sleep_s,
    scheduler_pid,
    sent: SocketBytes | BridgeBytes,
    separate_sync: bool,
    relay: bool = True,
) -> dict:
    policy = PPOPolicy(SleepEnv.observation_space, SleepEnv.action_space,
                       PPOPolicyConfig(hidden=(256, 256), seed=0))  # fmt: skip
    workers = WorkerSet(engine, sleep_env(sleep_s), policy, n, 1, FRAGMENT, seed=0,
                        remote_policy=policy.inference_copy(), direct_calls=True)  # fmt: skip
    me = threading.get_native_id()
    scheduler = psutil.Process(scheduler_pid) if scheduler_pid else None
    weights = policy.get_weights()

    def iteration() -> tuple[float, float]:
        nonlocal weights
        weights = {k: v + np.float32(1e-6) for k, v in weights.items()}  # new weights
        start = time.perf_counter()
        workers.sync_weights(weights, defer=not separate_sync)
        if relay:
            refs = workers.sample()
        else:  # each call on its own (what the driver paid before the relay)
            refs = [h.call("sample", **workers.sample_kwargs(h), direct=True)
                    for h in workers.remote_workers]  # fmt: skip
        results = engine.gather(refs, timeout=120)
        wall = time.perf_counter() - start
        return wall, wall - max(metrics["sample_s"] for _, metrics in results)

    try:
        for _ in range(3):  # warm up
            iteration()
        cpu, main, bytes_before = time.process_time(), thread_cpu(me), sent.total
        sched = sum(scheduler.cpu_times()[:2]) if scheduler else None
        rounds_before = engine.backend.routes["call"].relayed["rounds"]
        walls, beyond = zip(*(iteration() for _ in range(iterations)), strict=True)
        per = 1e3 / iterations
        return {
            "driver_cpu_ms": round((time.process_time() - cpu) * per, 2),
            "driver_main_cpu_ms": round((thread_cpu(me) - main) * per, 2),
            "scheduler_cpu_ms": None if scheduler is None
            else round((sum(scheduler.cpu_times()[:2]) - sched) * per, 2),
            "driver_sent_kb": round((sent.total - bytes_before) / 1024 / iterations, 1),
            "weights_kb": round(sum(v.nbytes for v in weights.values()) / 1024, 1),
            "beyond_slowest_ms": round(statistics.median(beyond) * 1e3, 2),
            "wall_ms": round(statistics.median(walls) * 1e3, 2),
            "relayed_rounds": round((engine.backend.routes["call"].relayed["rounds"]
                                     - rounds_before) / iterations, 2),
        }  # fmt: skip
    finally:
        workers.stop()


def separate_cluster(n: int, directory: str):
    """``dask scheduler`` and ``dask worker --nworkers n`` processes; (address, processes,
    scheduler pid)."""
    dask = shutil.which("dask") or "dask"
    file = os.path.join(directory, f"scheduler-{n}.json")
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--dashboard-address", ":0", "--scheduler-file", file],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline, address = time.monotonic() + 60, None
    while address is None and time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            with open(file) as f:
                address = json.load(f)["address"]
        except (OSError, ValueError, KeyError):  # not written yet, or half written
            continue
    workers = subprocess.Popen([dask, "worker", address, "--nworkers", str(n), "--nthreads", "1",
                                "--memory-limit", "0", "--host", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return address, (scheduler, workers), scheduler.pid


def host_cluster(n: int, n_hosts: int):
    """A scheduler on one emulated host and ``n / n_hosts`` one-thread worker processes
    on each of ``n_hosts`` others (`tests.hosts.HostCluster`): (the cluster, its
    hosts to close, the scheduler's pid)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.hosts import HostCluster, Hosts, missing

    problem = missing()
    if problem:
        raise SystemExit(f"--clusters hosts needs network namespaces: {problem}")
    if n % n_hosts:
        raise SystemExit(f"--clusters hosts: {n} workers do not split over {n_hosts} hosts")
    hosts = Hosts(n_hosts + 1).__enter__()
    try:
        cluster = HostCluster(hosts, None, threads=1, processes=n // n_hosts)
        return cluster, hosts, _pid_in_namespace(cluster.scheduler, "scheduler")
    except BaseException:
        hosts.close()
        raise


def _pid_in_namespace(launcher: subprocess.Popen, name: str) -> int:
    """The pid of the process ``nsenter`` started (its child, found by name)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            if name in " ".join(child.cmdline()):
                return child.pid
        time.sleep(0.1)
    return launcher.pid


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8, 16, 32])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--sleep-ms", type=float, default=2.0, help="each env step sleeps this")
    parser.add_argument("--clusters", nargs="+", default=["embedded", "separate"],
                        choices=["embedded", "separate", "hosts"])  # fmt: skip
    parser.add_argument(
        "--hosts",
        type=int,
        default=4,
        help="worker hosts for --clusters hosts (the workers split evenly)",
    )
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every count this many times, interleaved")  # fmt: skip
    parser.add_argument("--plot", help="write the figures against the worker count here")
    parser.add_argument(
        "--no-relay",
        action="store_true",
        help="send each sample call on its own, not one message per host through a "
        "host-mate (hrl_tasks.scheduler.relay): what the driver paid before",
    )
    parser.add_argument(
        "--separate-sync",
        action="store_true",
        help="send the weights in a call of their own before each sample call "
        "(two calls per worker), instead of riding on it as PPO's do",
    )
    args = parser.parse_args()
    sleep_s = args.sleep_ms / 1e3
    figures = {kind: {} for kind in args.clusters}
    runs = {kind: {} for kind in args.clusters}  # every round's row, for the medians
    sent = SocketBytes()
    with tempfile.TemporaryDirectory() as directory:
        for n in [n for _ in range(args.rounds) for n in args.workers]:
            if "embedded" in args.clusters:
                with hrl.Engine.local(n_workers=n, threads_per_worker=1) as engine:
                    figures["embedded"][n] = measure(engine, n, args.iterations, sleep_s, None,
                                                     sent, args.separate_sync, not args.no_relay)  # fmt: skip
                time.sleep(2.0)
            if "separate" in args.clusters:
                address, processes, scheduler_pid = separate_cluster(n, directory)
                try:
                    with hrl.Engine.connect(address) as engine:
                        engine.client.wait_for_workers(n, timeout=120)
                        figures["separate"][n] = measure(engine, n, args.iterations, sleep_s,
                                                         scheduler_pid, sent,
                                                         args.separate_sync, not args.no_relay)  # fmt: skip
                finally:
                    for process in reversed(processes):
                        process.terminate()
                        process.wait(timeout=60)
                time.sleep(2.0)
            if "hosts" in args.clusters:
                cluster, hosts, scheduler_pid = host_cluster(n, args.hosts)
                try:
                    from tests.hosts import connect

                    with connect(cluster, n, timeout=120) as engine:
                        bridge = BridgeBytes(hosts.bridge)
                        figures["hosts"][n] = measure(engine, n, args.iterations, sleep_s,
                                                      scheduler_pid, bridge,
                                                      args.separate_sync, not args.no_relay)  # fmt: skip
                finally:
                    hosts.close()
                time.sleep(2.0)
            for kind, rows in figures.items():
                if n in rows:
                    runs[kind].setdefault(n, []).append(rows[n])
            print(json.dumps({"workers": n, **{k: v.get(n) for k, v in figures.items()}}),
                  file=sys.stderr, flush=True)  # fmt: skip
    result = {
        "bench": "scale",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "sleep_ms": args.sleep_ms,
        "fragment": FRAGMENT,
        "iterations": args.iterations,
        "weights": "own call" if args.separate_sync else "with the sample call",
        "relay": not args.no_relay,
        **{kind: {str(n): row for n, row in rows.items()} for kind, rows in figures.items()},
    }
    if args.rounds > 1:  # the medians over rounds, each round's rows beside them
        result["rounds"] = args.rounds
        for kind, rows in runs.items():
            result[kind] = {str(n): median_row(rs) for n, rs in rows.items()}
            result[f"{kind}_runs"] = {str(n): rs for n, rs in rows.items()}
    fewest, most = min(args.workers), max(args.workers)
    result["driver_cpu_most_over_fewest"] = {
        kind: round(result[kind][str(most)]["driver_cpu_ms"]
                    / result[kind][str(fewest)]["driver_cpu_ms"], 3)
        for kind in args.clusters
    }  # fmt: skip
    print(json.dumps(result))
    if args.plot:
        plot(figures, args.plot)


def median_row(rows: list[dict]) -> dict:
    """Each figure's median over ``rows`` (None where a row has none)."""
    return {
        key: None
        if any(r[key] is None for r in rows)
        else round(statistics.median(r[key] for r in rows), 2)
        for key in rows[0]
    }


def plot(figures: dict, path: str) -> None:
    """Each figure against the worker count, one panel each, a line per cluster."""
    from hrl_tasks.plotting import pyplot

    plt = pyplot()
    keys = ["driver_cpu_ms", "scheduler_cpu_ms", "driver_sent_kb", "beyond_slowest_ms"]
    colors = {"embedded": "C0", "separate": "C1", "hosts": "C2"}
    fig, axes = plt.subplots(1, len(keys), figsize=(14, 3.4), dpi=110)
    for ax, key in zip(axes, keys, strict=True):
        for kind, rows in figures.items():
            ns = sorted(int(n) for n in rows if rows[n][key] is not None)
            rows = {int(n): row for n, row in rows.items()}
            if ns:
                ax.plot(ns, [rows[n][key] for n in ns], marker="o", label=kind, color=colors[kind])
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({int(n) for rows in figures.values() for n in rows}))
        ax.set_xticklabels([str(t) for t in ax.get_xticks()])
        ax.set_xlabel("rollout workers")
        ax.set_title(key.replace("_", " ") + " per iteration", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
