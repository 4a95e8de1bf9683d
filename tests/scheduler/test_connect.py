"""Engine.connect to a separately started `dask scheduler` and `dask worker`."""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import hrl_tasks as hrl
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
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [
        subprocess.Popen(
            dask_command("scheduler", "--port", "0", "--dashboard-address", ":0",
                         "--scheduler-file", str(scheduler_file)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
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
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            )
        )  # fmt: skip
        yield ExternalCluster(scheduler_file, procs[0])
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


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


def test_connect_to_nothing_fails_clearly():
    with pytest.raises(OSError):
        hrl.Engine.connect("tcp://127.0.0.1:1", timeout=2)


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
    assert run.returncode == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("hrl-tasks: error: lost the Dask scheduler at tcp://"), err[-2000:]
