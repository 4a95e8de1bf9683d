"""Hosts on one machine: network namespaces on a bridge, each with a private ``/tmp``.

``Hosts(n)`` makes ``n`` hosts, each a network namespace with its own address on
a bridge in the root namespace (a veth pair per host; the driver, in the root
namespace, reaches them at their addresses through the bridge's own) and its own
mount namespace with a private ``/tmp``, kept by one holder process that every
process started on the host joins (``nsenter``): two processes on one host share
their ``/tmp``, two hosts do not. Everything it made goes on exit, after a failure
too (a context manager, and an ``atexit`` hook for a process that ends without
leaving it); what an earlier process that died without cleaning up left behind
(its prefix names its pid) goes at the next start.

The addresses come from a private range checked unused on this machine. Traffic
stays on the bridge: nothing is routed or forwarded. Needs root (``ip netns``).
This kernel has no ``netem``: a link is up or down, never slow.

    with Hosts(3) as hosts:
        scheduler = hosts[0].start("dask", "scheduler", "--host", hosts[0].address, ...)
        hosts.kill(hosts[1])         # every process on the host, then its link down
        hosts.partition(hosts[2])    # its link down, its processes alive

`HostCluster` puts a Dask cluster on them (the scheduler on the first, workers on
the others) and `connect` reaches it from the root namespace.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PORT = 8786  # the scheduler's, on its host
PREFIX = "hrlh"  # every name made here begins with it, then the maker's pid
# Candidate ranges, private (10/8) and unlikely to be taken: the first one free is used.
RANGES = [
    ipaddress.ip_network(f"10.{second}.{third}.0/24")
    for second in (231, 232, 233)
    for third in range(0, 256, 17)
]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def missing() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        ip("netns", "list")
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"`ip netns` does not work: {exc!r}"
    return None


@dataclass
class Host:
    """One emulated host: ``name`` (its network namespace), ``address``, ``link`` (the
    root side of its veth pair), and the processes started on it."""

    name: str
    address: str
    link: str
    holder: subprocess.Popen | None = None
    processes: list[subprocess.Popen] = field(default_factory=list)

    def command(self, *args: str) -> list[str]:
        """``args`` as a command run on this host (its network and its ``/tmp``)."""
        return ["nsenter", "-t", str(self.holder.pid), "-n", "-m", "--", *args]

    def start(self, *args: str, env: dict | None = None, log: Path | None = None):
        """Start ``args`` on this host, in a session of its own, its output to ``log``;
        kept for teardown."""
        with open(log or os.devnull, "w") as out:  # the child keeps its own copy
            proc = subprocess.Popen(
                self.command(*args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.processes.append(proc)
        return proc

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``args`` on this host to its end."""
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, check=True
        )

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        found = ip("netns", "pids", self.name, check=False).stdout.split()
        return [int(pid) for pid in found]


class Hosts:
    """``n`` hosts on a bridge (see the module)."""

    def __init__(self, n: int):
        self.tag = f"{PREFIX}{os.getpid() % 100000}"
        self.bridge = f"{self.tag}b"
        self.n = n
        self.hosts: list[Host] = []
        self.network: ipaddress.IPv4Network | None = None
        self.gateway: str | None = None  # the bridge's address: the root namespace's

    def __enter__(self) -> Hosts:
        remove_stale()
        atexit.register(self.close)
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __iter__(self):
        return iter(self.hosts)

    def _make(self) -> None:
        self.network = free_range()
        addresses = list(self.network.hosts())
        self.gateway = str(addresses[0])
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{self.network.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            name, link, peer = f"{self.tag}h{i}", f"{self.tag}v{i}", f"{self.tag}p{i}"
            host = Host(name, str(addresses[10 + i]), link)
            self.hosts.append(host)
            ip("netns", "add", name)
            ip("link", "add", link, "type", "veth", "peer", "name", peer)
            ip("link", "set", link, "master", self.bridge)
            ip("link", "set", link, "up")
            ip("link", "set", peer, "netns", name)
            inside = ("netns", "exec", name, "ip")
            ip(*inside, "link", "set", peer, "name", "eth0")
            ip(*inside, "addr", "add", f"{host.address}/{self.network.prefixlen}", "dev", "eth0")
            ip(*inside, "link", "set", "eth0", "up")
            ip(*inside, "link", "set", "lo", "up")
            host.holder = hold_mounts(name)

    def kill(self, host: Host) -> None:
        """The host is lost: every process on it killed, then its link taken down."""
        kill_all(host)
        self.partition(host)

    def partition(self, host: Host) -> None:
        """The host's link goes down: its processes live on, unreachable."""
        ip("link", "set", host.link, "down")

    def heal(self, host: Host) -> None:
        ip("link", "set", host.link, "up")

    def close(self) -> None:
        """Kill every process on the hosts; remove the namespaces, links and bridge."""
        atexit.unregister(self.close)
        for host in self.hosts:
            kill_all(host)
            ip("netns", "delete", host.name, check=False)  # its veth pair goes with it
            ip("link", "delete", host.link, check=False)
        self.hosts = []
        ip("link", "delete", self.bridge, check=False)


def hold_mounts(netns: str) -> subprocess.Popen:
    """A process in ``netns`` holding a mount namespace of its own with a private
    ``/tmp`` (a tmpfs), for the host's processes to join; it waits until killed.

    The software is on every host, as a shared install is on real ones: whatever of
    Python's install, its import path and this checkout lies under ``/tmp`` is bound
    into the host's ``/tmp`` at the same place; nothing else of the machine's is."""
    binds = ""
    for path in software_in_tmp():  # /tmp/x is bound at /mnt/x, moved to /tmp/x below
        there = shlex.quote("/mnt" + path.removeprefix("/tmp"))
        binds += f" && mkdir -p {there} && mount --bind {shlex.quote(path)} {there}"
    script = (
        "mount --make-rprivate / && mount -t tmpfs tmpfs /mnt"
        f"{binds} && mount --move /mnt /tmp && echo ready && exec sleep infinity"
    )
    holder = subprocess.Popen(
        ["ip", "netns", "exec", netns, "unshare", "-m", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if holder.stdout.readline().strip() != "ready":
        holder.kill()
        raise RuntimeError(f"no private /tmp on host {netns}: {holder.stderr.read()}")
    return holder


def software_in_tmp() -> list[str]:
    """The top directories under ``/tmp`` that hold Python's install, its import path
    or this checkout (a virtual environment or a clone made there), sorted."""
    places = [sys.prefix, sys.base_prefix, *sys.path, str(Path(__file__).resolve().parent)]
    tops = set()
    for place in places:
        parts = Path(place or ".").resolve().parts
        if len(parts) > 2 and parts[:2] == ("/", "tmp") and Path(*parts[:3]).is_dir():
            tops.add(str(Path(*parts[:3])))
    return sorted(tops)


def kill_all(host: Host) -> None:
    """SIGKILL every process in the host's namespace (and those it started here, which
    may have left it) until none is left."""
    for proc in [*host.processes, *([host.holder] if host.holder else [])]:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids := host.pids():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes on host {host.name} did not die: {pids}")
        time.sleep(0.05)
    for proc in [*host.processes, *([host.holder] if host.holder else [])]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def free_range() -> ipaddress.IPv4Network:
    """A /24 of :data:`RANGES` that no address or route on this machine touches."""
    used = [
        ipaddress.ip_network(word, strict=False)
        for line in ip("-4", "addr").stdout.splitlines() + ip("-4", "route").stdout.splitlines()
        for word in line.split()
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+(/\d+)?", word)
    ]
    for network in RANGES:
        if not any(network.overlaps(other) for other in used):
            return network
    raise RuntimeError(f"every candidate range is in use here: {RANGES[0]} ... {RANGES[-1]}")


def leftovers(tag: str = PREFIX) -> dict[str, list[str]]:
    """Namespaces and links here whose name begins with ``tag``."""
    spaces = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line]
    links = re.findall(r"^\d+: ([^:@]+)", ip("link").stdout, flags=re.M)
    return {
        "namespaces": [s for s in spaces if s.startswith(tag)],
        "links": [link for link in links if link.startswith(tag)],
    }


def remove_stale() -> None:
    """Remove what a process that died without cleaning up left (its pid is gone)."""
    found = leftovers()
    for name in found["namespaces"] + found["links"]:
        pid = int(re.match(rf"{PREFIX}(\d+)", name).group(1))
        if pid == os.getpid() % 100000 or any(
            p % 100000 == pid for p in map(int, filter(str.isdigit, os.listdir("/proc")))
        ):
            continue  # its maker (or one whose pid ends alike) still runs
        if name in found["namespaces"]:
            stale = Host(name, "", "")
            for p in stale.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            ip("netns", "delete", name, check=False)
        else:
            ip("link", "delete", name, check=False)


def dask_command(*args: str) -> list[str]:
    exe = shutil.which("dask")
    return [exe, *args] if exe else [sys.executable, "-m", "dask", *args]


class HostCluster:
    """A scheduler on ``hosts[0]`` and, on each other host, ``processes`` worker
    processes of ``threads`` threads (``dask worker --nworkers``). Each worker host
    also offers a resource named after it (``host1=1``, ...), so that a task can be
    placed on a given host."""

    def __init__(self, hosts: Hosts, logs: Path | None, threads: int = 2, processes: int = 1):
        self.hosts = hosts
        self.scheduler_host, *self.worker_hosts = list(hosts)
        self.address = f"tcp://{self.scheduler_host.address}:{PORT}"
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

        def log(name: str) -> Path | None:
            return None if logs is None else logs / f"{name}.log"

        self.scheduler = self.scheduler_host.start(
            *dask_command(
                "scheduler", "--host", self.scheduler_host.address, "--port", str(PORT),
                "--no-dashboard",
            ),
            env=env,
            log=log("scheduler"),
        )  # fmt: skip
        for i, host in enumerate(self.worker_hosts):
            host.start(
                *dask_command(
                    "worker", self.address, "--host", host.address, "--nthreads", str(threads),
                    "--nworkers", str(processes), "--memory-limit", "0", "--no-dashboard",
                    "--name", f"host{i + 1}", "--resources", f"host{i + 1}=1,CPU={threads}",
                ),
                env=env,
                log=log(f"worker{i + 1}"),
            )  # fmt: skip

    def wait_for_workers(self, engine, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(engine.client.scheduler_info(n_workers=-1)["workers"]) < n:
            assert time.monotonic() < deadline, f"fewer than {n} workers joined"
            time.sleep(0.2)


def connect(cluster: HostCluster, workers: int, timeout: float = 60):
    """An `Engine.connect` to ``cluster`` once its scheduler listens and ``workers``
    worker processes joined."""
    import hrl_tasks as hrl

    deadline = time.monotonic() + timeout
    while True:  # the scheduler takes a moment to listen
        try:
            engine = hrl.Engine.connect(cluster.address, timeout=5)
            break
        except OSError:
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.5)
    cluster.wait_for_workers(engine, workers, timeout)
    return engine


def worker_hosts_of(engine) -> set[str]:
    """The addresses (without ports) of the engine's workers."""
    workers = engine.client.scheduler_info(n_workers=-1)["workers"]
    return {address.split("://")[1].rsplit(":", 1)[0] for address in workers}
