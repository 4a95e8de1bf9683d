"""The hosts harness itself (tests/hosts.py): addresses, a private /tmp per host, a lost
host and a partition, and nothing left behind, after a failure or a killed maker too."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import require_real_part
from tests.hosts import Hosts, leftovers, software_in_tmp

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.once


@pytest.fixture(autouse=True)
def needs_namespaces():
    from tests.hosts import missing

    require_real_part("network namespaces", missing())


def reaches(host, address: str, port: int, timeout: float = 3.0) -> bool:
    """Whether a TCP connect from ``host`` (None: the root namespace) to ``address`` works."""
    code = f"import socket; socket.create_connection(({address!r}, {port}), timeout={timeout})"
    command = [sys.executable, "-c", code]
    try:
        subprocess.run(
            host.command(*command) if host else command,
            capture_output=True,
            check=True,
            timeout=timeout + 5,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return False
    return True


def listen(host, port: int) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import socket, time
        s = socket.socket(); s.bind(("0.0.0.0", {port})); s.listen(16)
        while True:
            c, _ = s.accept(); c.close()
    """)
    proc = host.start(sys.executable, "-c", code)
    deadline = time.monotonic() + 10
    while not reaches(host, "127.0.0.1", port, timeout=0.5):
        assert time.monotonic() < deadline, "the listener did not start"
    return proc


def test_hosts_reach_each_other_and_the_driver_reaches_them_by_their_addresses():
    with Hosts(3) as hosts:
        assert len({h.address for h in hosts}) == 3
        listen(hosts[0], 47001)
        assert reaches(None, hosts[0].address, 47001)  # the driver, from the root namespace
        assert reaches(hosts[1], hosts[0].address, 47001)
        assert not reaches(hosts[1], "127.0.0.1", 47001)  # loopback is the host's own


def test_each_host_has_its_own_tmp_shared_by_its_processes():
    mark = f"hrl-hosts-{os.getpid()}"
    with Hosts(2) as hosts:
        hosts[0].run("sh", "-c", f"echo here > /tmp/{mark}")
        assert hosts[0].run("cat", f"/tmp/{mark}").stdout == "here\n"  # another process
        software = [Path(path).name for path in software_in_tmp()]  # a venv made in /tmp
        assert hosts[1].run("ls", "/tmp").stdout.split() == software
        assert not Path("/tmp", mark).exists()
        assert hosts[1].run(sys.executable, "-c", "import hrl_tasks").returncode == 0


def test_a_lost_host_has_no_process_and_no_link_and_a_partitioned_one_keeps_its_processes():
    with Hosts(3) as hosts:
        lost, cut = hosts[1], hosts[2]
        listen(lost, 47002)
        listener = listen(cut, 47003)
        hosts.kill(lost)
        assert lost.pids() == []
        assert not reaches(hosts[0], lost.address, 47002)
        hosts.partition(cut)
        assert listener.poll() is None and cut.pids()
        assert not reaches(hosts[0], cut.address, 47003, timeout=1.0)
        hosts.heal(cut)
        assert reaches(hosts[0], cut.address, 47003)


def test_nothing_is_left_after_a_failure_inside():
    with pytest.raises(RuntimeError, match="inside"), Hosts(2) as hosts:
        tag = hosts.tag
        pids = [listen(hosts[0], 47004).pid]
        raise RuntimeError("a failure inside")
    assert leftovers(tag) == {"namespaces": [], "links": []}
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_what_a_killed_maker_left_goes_at_the_next_start():
    code = textwrap.dedent("""
        import sys, time
        from tests.hosts import Hosts
        hosts = Hosts(2).__enter__()
        print(hosts.tag, flush=True)
        time.sleep(600)
    """)
    maker = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    tag = maker.stdout.readline().strip()
    assert leftovers(tag)["namespaces"]
    maker.send_signal(signal.SIGKILL)  # no atexit, no cleanup of its own
    maker.wait()
    assert leftovers(tag)["namespaces"]
    with Hosts(1):
        assert leftovers(tag) == {"namespaces": [], "links": []}
