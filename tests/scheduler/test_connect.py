"""Engine.connect to a separately started `dask scheduler` and `dask worker`."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


def dask_command(*args):
    exe = shutil.which("dask")
    return [exe, *args] if exe else [sys.executable, "-m", "dask", *args]


ROOT = Path(__file__).resolve().parents[2]


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
        yield scheduler_file
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_connect_runs_tasks_nested_tasks_and_objects(external_cluster):
    import json

    address = json.loads(external_cluster.read_text())["address"]
    with hrl.Engine.connect(address) as engine:
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
