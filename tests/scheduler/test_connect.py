"""Engine.connect to a separately started `dask scheduler` and `dask worker`."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import wire
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


def dask_command(*args):
    exe = shutil.which("dask")
    return [exe, *args] if exe else [sys.executable, "-m", "dask", *args]


ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ExternalCluster:
    scheduler_file: Path
    scheduler: subprocess.Popen

    @property
    def address(self) -> str:
        return json.loads(self.scheduler_file.read_text())["address"]


@pytest.fixture
def external_cluster(tmp_path):
    yield from start_external_cluster(tmp_path, [ROOT])


def start_external_cluster(tmp_path, worker_path):
    """A `dask scheduler` and a `dask worker` (``worker_path`` first on its PYTHONPATH)."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    worker_env = {**env, "PYTHONPATH": os.pathsep.join([*map(str, worker_path), env["PYTHONPATH"]])}
    procs = [
        subprocess.Popen(
            dask_command("scheduler", "--port", "0", "--dashboard-address", ":0",
                         "--scheduler-file", str(scheduler_file)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, "dask scheduler did not start"
            time.sleep(0.1)
        time.sleep(0.2)
        procs.append(
            subprocess.Popen(
                dask_command("worker", "--scheduler-file", str(scheduler_file),
                             "--nthreads", "1", "--resources", "CPU=1,GPU=1"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=worker_env,
                start_new_session=True,  # its nanny's worker process too, for the kill below
            )
        )  # fmt: skip
        yield ExternalCluster(scheduler_file, procs[0])
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:  # a worker whose scheduler was killed waits for it in vain: 3 s is enough
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


def test_connect_runs_tasks_nested_tasks_and_objects(external_cluster):
    with hrl.Engine.connect(external_cluster.address) as engine:
        engine.client.wait_for_workers(1, timeout=60)
        assert engine.submit(tasks.inc, 41, resources={"GPU": 1}).result(timeout=60) == 42
        assert engine.submit(tasks.tree, 2, 3).result(timeout=60) == 9
        counter = engine.create_worker(tasks.Counter, start=1)
        assert counter.call("add", 1).result(timeout=60) == 2
        counter.kill()
        with pytest.raises(hrl.ResourceError):
            engine.submit(tasks.inc, 1, resources={"GPU": 2})


def test_connect_to_nothing_fails_within_seconds_saying_so():
    start = time.monotonic()
    with pytest.raises(OSError, match="nothing listens at tcp://127.0.0.1:9"):
        hrl.Engine.connect("tcp://127.0.0.1:9")
    assert time.monotonic() - start < 5.0


def stub_distribution(root, name, version):
    """A dist-info that shadows ``name``'s metadata (not its code) with ``version``."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def test_a_worker_whose_environment_differs_is_named_at_connect(tmp_path):
    stub = stub_distribution(tmp_path / "stub", "gymnasium", "0.0.1")
    for cluster in start_external_cluster(tmp_path, [stub, ROOT]):
        wait_for_a_worker(cluster.address)
        start = time.monotonic()
        with pytest.raises(hrl.EngineError) as info:  # before any engine exists
            hrl.Engine.connect(cluster.address)
        message = str(info.value)
        assert "gymnasium 0.0.1 (needs 1.x" in message and "tcp://" in message, message
        assert time.monotonic() - start < 10  # a connect takes about a second here


def test_upload_gives_workers_without_the_package_this_one(tmp_path):
    # A stub hrl_tasks first on the worker's path stands for a worker without this one.
    stub = tmp_path / "stub"
    (stub / "hrl_tasks").mkdir(parents=True)
    (stub / "hrl_tasks" / "__init__.py").write_text("__version__ = '0.0.0'\n")
    for cluster in start_external_cluster(tmp_path, [stub]):
        wait_for_a_worker(cluster.address)
        with pytest.raises(hrl.EngineError, match=r"hrl_tasks 0.0.0 \(needs"):
            hrl.Engine.connect(cluster.address)
        with hrl.Engine.connect(cluster.address, upload=True) as engine:
            engine.client.wait_for_workers(1, timeout=60)
            assert engine.submit(tasks.inc, 1).result(timeout=60) == 2


def wait_for_a_worker(address):
    from distributed import Client

    with Client(address, timeout=30) as client:
        client.wait_for_workers(1, timeout=60)


def test_a_dead_scheduler_fails_waits_and_submits_within_seconds(external_cluster):
    with hrl.Engine.connect(external_cluster.address) as engine:
        engine.client.wait_for_workers(1, timeout=60)
        counter = engine.create_worker(tasks.Counter, start=1)
        assert counter.call("add", 1, direct=True).result(timeout=60) == 2
        waiting = engine.submit(tasks.sleep_then, 1, 30)
        external_cluster.scheduler.kill()
        start = time.monotonic()
        with pytest.raises(hrl.SchedulerLostError, match="lost the Dask scheduler at tcp://"):
            waiting.result(timeout=20)
        assert time.monotonic() - start < 20  # within a second when the machine is idle
        with pytest.raises(hrl.SchedulerLostError):
            engine.submit(tasks.inc, 1).result(timeout=5)
        with pytest.raises(hrl.SchedulerLostError):
            counter.call("add", 1, direct=True).result(timeout=5)


def test_the_command_line_ends_clearly_when_the_scheduler_dies(external_cluster, tmp_path):
    command = [sys.executable, "-m", "hrl_tasks.cli", "train", "ppo", "--address",
               external_cluster.address, "--num-workers", "1", "--no-progress",
               "--stop-iters", "100000", "--out", str(tmp_path / "run")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, cwd=tmp_path)  # fmt: skip
    try:
        for line in run.stdout:  # the run is training: kill the scheduler under it
            if line.startswith("iter=3 "):
                break
        external_cluster.scheduler.kill()
        _, err = run.communicate(timeout=90)  # the engine raises in a second; exit takes longer
    finally:
        run.kill()
    assert run.returncode == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("hrl-tasks: error: lost the Dask scheduler at tcp://"), err[-2000:]


@pytest.mark.timeout(120)
def test_a_tls_cluster_takes_its_certificates_and_refuses_others_clearly(capsys):
    from distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    with LocalCluster(n_workers=1, threads_per_worker=1, security=security, protocol="tls",
                      host="127.0.0.1", dashboard_address=":0") as cluster:  # fmt: skip
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        with hrl.Engine.connect(address, security=security) as engine:
            assert engine.submit(tasks.inc, 1).result(timeout=60) == 2
            # the direct route's stream stays Dask's comm over TLS, and carries what TCP does
            refs = [engine.submit(tasks.inc, i, route="direct") for i in range(50)]
            assert engine.gather(refs, timeout=60) == list(range(1, 51))
            big = engine.submit(tasks.length, np.zeros(50_000), route="direct")
            assert big.result(timeout=60) == 50_000
            streams = [channel.stream for channel in engine.backend.streams.channels.values()]
            assert streams and all(isinstance(s, wire.DaskStream) for s in streams)
        stranger = Security.temporary()
        our_ca_their_cert = Security(tls_ca_file=security.tls_ca_file, require_encryption=True,
                                     tls_client_cert=stranger.tls_client_cert,
                                     tls_client_key=stranger.tls_client_key)  # fmt: skip
        for other, says in [(None, "needs certificates"),
                            (stranger, "certificates were refused"),
                            (our_ca_their_cert, "certificates were refused")]:  # fmt: skip
            start = time.monotonic()
            with pytest.raises(OSError, match=says):
                hrl.Engine.connect(address, security=other, timeout=5)
            assert time.monotonic() - start < 15
        with pytest.raises(OSError, match="uses TLS"):
            hrl.Engine.connect(address.replace("tls://", "tcp://"), timeout=5)
        check_the_command_line(address, security, capsys)


@pytest.mark.timeout(120)
def test_a_tls_address_without_certificates_takes_dask_configured_ones(tmp_path):
    import dask
    from distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()  # a CA of its own, and certificates it signed
    pems = {
        "ca-file": security.tls_ca_file,
        "client.cert": security.tls_client_cert,
        "client.key": security.tls_client_key,
    }
    files = {}
    for key, pem in pems.items():
        files[f"distributed.comm.tls.{key}"] = str(tmp_path / f"{key}.pem")
        (tmp_path / f"{key}.pem").write_text(pem)
    configured = {**files, "distributed.comm.require-encryption": True}
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        security=security,
        protocol="tls",
        host="127.0.0.1",
        dashboard_address=":0",
    )
    with cluster:
        address = cluster.scheduler_address
        with dask.config.set(configured), hrl.Engine.connect(address, timeout=30) as engine:
            assert engine.submit(tasks.inc, 1).result(timeout=60) == 2
        with pytest.raises(OSError, match="needs certificates.*distributed.comm.tls.ca-file"):
            hrl.Engine.connect(address, timeout=5)  # no certificates in Dask's config either


def check_the_command_line(address, security, capsys):
    """The command line's --tls-* options: certificates from files, or a clear refusal."""
    import tempfile

    from hrl_tasks.cli import main

    with tempfile.TemporaryDirectory() as files:
        paths = {}
        for option, pem in [("--tls-ca-file", security.tls_ca_file),
                            ("--tls-cert", security.tls_client_cert),
                            ("--tls-key", security.tls_client_key)]:  # fmt: skip
            paths[option] = Path(files) / option.strip("-")
            paths[option].write_text(pem)
        tiny = [
            "--stop-iters",
            "1",
            "--num-workers",
            "1",
            "--set",
            "train_batch_size=32",
            "--no-progress",
        ]
        certificates = [x for option, path in paths.items() for x in (option, str(path))]
        first = ["--out", str(Path(files) / "run")]
        assert main(["train", "ppo", "--address", address, *certificates, *tiny, *first]) == 0
        capsys.readouterr()
        second = ["--out", str(Path(files) / "run-2")]  # the first run's directory is taken
        assert main(["train", "ppo", "--address", address, *tiny, *second]) == 2
        assert "needs certificates: --tls-ca-file" in capsys.readouterr().err


def test_the_embedded_cluster_listens_on_this_machine_only():
    with hrl.Engine.local(n_workers=1) as engine:
        addresses = [engine.client.scheduler.address, *engine.client.scheduler_info()["workers"]]
        assert all(a.startswith("tcp://127.0.0.1:") for a in addresses), addresses
        assert engine.dashboard_link.startswith("http://127.0.0.1:")
