"""Training on SLURM worker jobs through dask-jobqueue, against a real controller.

`.ci/run` starts a single-node SLURM (`.ci/slurm-ci.sh start`) and runs these with
``CI=true``: there a missing SLURM fails them. Elsewhere (a laptop without
``sbatch``) they skip, saying why.
"""

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import hrl_tasks
from hrl_tasks.algorithms import PPO
from hrl_tasks.cli import main
from hrl_tasks.scheduler.clusters import job_ids
from tests.conftest import require_real_part

pytestmark = [pytest.mark.cluster, pytest.mark.slurm]
JOB = {"cores": 1, "memory": "2GB", "walltime": "00:20:00"}


@pytest.fixture(scope="module", autouse=True)
def slurm():
    """Fails in CI and skips elsewhere when no SLURM controller answers."""
    why = None
    if shutil.which("sbatch") is None:
        why = "no sbatch on PATH (SLURM is not installed here)"
    else:
        found = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        if found.returncode != 0 or not set(found.stdout.split()) & {"idle", "mixed", "allocated"}:
            why = f"sinfo finds no SLURM node: {found.stderr.strip() or found.stdout.strip()}"
    require_real_part("SLURM", why)
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        require_real_part("SLURM", "needs dask-jobqueue (the hpc extra): pip install -e .[hpc]")


def queued() -> set[str]:
    """The ids of the jobs SLURM holds now."""
    found = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return set(found.stdout.split())


def options(tmp_path) -> dict:
    return dict(JOB, log_directory=str(tmp_path / "logs"))


@pytest.mark.once
@pytest.mark.timeout(300)
def test_ppo_reaches_450_with_its_rollout_workers_in_slurm_jobs(tmp_path):
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(**options(tmp_path), worker_extra_args=["--resources", "CPU=1"])
    cluster.scale(jobs=2)
    try:
        with hrl_tasks.Engine.from_cluster(cluster) as engine:
            engine.client.wait_for_workers(2, timeout=120)
            ids = job_ids(cluster)
            assert len(ids) == 2 and set(ids) <= queued()
            algo, result = hrl_tasks.train("ppo", "CartPole-v1", engine=engine,
                                           stop={"episode_return_mean": 450,
                                                 "iteration": 400})  # fmt: skip
            try:
                assert result["episode_return_mean"] >= 450
                workers = set(engine.client.scheduler_info()["workers"])
                assert {h.address for h in algo.workers.remote_workers} <= workers
            finally:
                algo.stop()
    finally:
        cluster.close()
    deadline = time.monotonic() + 30
    while set(ids) & queued() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not set(ids) & queued(), "the worker jobs outlived their cluster"


@pytest.mark.timeout(300)
def test_the_command_line_submits_jobs_prints_them_and_resumes_on_new_ones(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    cluster = ["--cluster", "slurm", "--jobs", "2", "--cluster-opt", "cores=1",
               "--cluster-opt", "memory=2GB"]  # fmt: skip
    tiny = ["--num-workers", "2", "--set", "train_batch_size=64", "--no-progress",
            "--set", "rollout_fragment_length=16"]  # fmt: skip
    argv = ["train", "ppo", "--env", "CartPole-v1", "--stop-iters", "2", "--out", str(out)]
    assert main([*argv, *cluster, *tiny]) == 0
    printed = capsys.readouterr().out
    assert "worker jobs: " in printed and "dashboard: http" in printed
    first_jobs = printed.split("worker jobs: ")[1].splitlines()[0].split(", ")
    assert len(first_jobs) == 2
    # The allocation ended with the run; a later one resumes from the checkpoint.
    assert main(["train", "ppo", "--resume", str(out), "--stop-iters", "3", *cluster,
                 "--no-progress"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert not set(first_jobs) & set(printed.split("worker jobs: ")[1].splitlines()[0].split(", "))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    # The worker jobs' output went to the run's directory, none to the current one.
    assert list((out / "worker-logs").iterdir()) and not list(tmp_path.glob("slurm-*"))


@pytest.mark.timeout(300)
def test_a_resource_only_worker_jobs_declare_places_rollout_workers_on_each_of_them(
    tmp_path, monkeypatch
):
    # The driver's allocator settings reach the worker jobs too.
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    # No GPU here: a custom resource name stands for one.
    with hrl_tasks.Engine.batch("slurm", 2, options(tmp_path), resources={"sampler": 1}) as engine:
        engine.client.wait_for_workers(2, timeout=120)
        assert "export MALLOC_MMAP_THRESHOLD_=65536" in engine.cluster.job_script()
        found = engine.client.run(os.getenv, "MALLOC_MMAP_THRESHOLD_")
        assert set(found.values()) == {"65536"}, found
        declared = {w: r["declared"] for w, r in engine.resources().items()}
        assert all(r == {"CPU": 1.0, "sampler": 1.0} for r in declared.values()), declared
        algo = PPO(
            {"num_workers": 2, "train_batch_size": 64, "rollout_fragment_length": 16,
             "rollout_worker_resources": {"sampler": 1}}, engine=engine,
        )  # fmt: skip
        try:
            algo.train()
            assert {h.address for h in algo.workers.remote_workers} == set(declared)
        finally:
            algo.stop()
        with pytest.raises(hrl_tasks.ResourceError, match="sampler=2"):
            PPO({"num_workers": 1,
                                      "rollout_worker_resources": {"sampler": 2}},
                                     engine=engine)  # fmt: skip


def job_of(engine, address: str) -> str:
    """The SLURM job id of the worker process at ``address`` (one process per job)."""
    name = engine.client.scheduler_info()["workers"][address]["name"]
    return str(engine.cluster.workers[name].job_id)


@pytest.mark.timeout(300)
def test_a_worker_job_cancelled_mid_training_costs_no_iteration_and_is_replaced(tmp_path):
    # Each 1-CPU job holds one rollout worker: the lost one can only come back on the
    # job that replaces the cancelled one.
    with hrl_tasks.Engine.batch("slurm", 2, options(tmp_path)) as engine:
        engine.client.wait_for_workers(2, timeout=120)
        first = job_ids(engine.cluster)
        algo = PPO({"num_workers": 2, "train_batch_size": 1024,
                    "rollout_worker_resources": {"CPU": 1}}, engine=engine)  # fmt: skip
        try:
            for _ in range(3):
                algo.train()
            before = {h.address: job_of(engine, h.address) for h in algo.workers.remote_workers}
            assert sorted(before.values()) == first
            # Cancelled while training runs, not between two calls of train().
            cancel = threading.Timer(0.5, subprocess.run, (["scancel", first[0]],))
            cancel.start()
            results = [algo.train() for _ in range(12)]
            cancel.join()
            assert [r["iteration"] for r in results] == list(range(4, 16))
            assert sum(h.restarts for h in algo.workers.remote_workers) == 1
            now = job_ids(engine.cluster)
            assert first[0] not in now and len(set(now) - set(first)) >= 1
            after = {job_of(engine, h.address) for h in algo.workers.remote_workers}
            assert first[1] in after and after - {first[1]} <= set(now) - set(first), after
        finally:
            algo.stop()


@pytest.mark.timeout(180)
def test_settings_and_a_users_own_resources_come_from_dasks_jobqueue_configuration(tmp_path):
    import dask

    logs = tmp_path / "logs"
    settings = {"jobqueue.slurm.cores": 1, "jobqueue.slurm.memory": "2GB",
                "jobqueue.slurm.walltime": "00:19:00", "jobqueue.slurm.log-directory": str(logs),
                "jobqueue.slurm.worker-extra-args": ["--resources", "sampler=1"]}  # fmt: skip
    with dask.config.set(settings), hrl_tasks.Engine.batch("slurm", 1) as engine:
        engine.client.wait_for_workers(1, timeout=120)
        script = engine.cluster.job_script()
        assert "#SBATCH -t 00:19:00" in script and "#SBATCH --mem=" in script, script
        assert [r["declared"] for r in engine.resources().values()] == [
            {"CPU": 1.0, "sampler": 1.0}
        ]
        algo = PPO({"num_workers": 1, "train_batch_size": 64,
                    "rollout_worker_resources": {"sampler": 1}}, engine=engine)  # fmt: skip
        try:
            assert algo.train()["iteration"] == 1
        finally:
            algo.stop()
    assert list(logs.glob("*.err")) or list(logs.glob("*.out")), "no job log in log-directory"


@pytest.mark.timeout(300)
def test_the_example_batch_script_trains_and_a_second_allocation_resumes(tmp_path):
    script = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "train_ppo.sbatch"
    env = {**os.environ, "OUT": str(tmp_path / "run"), "JOBS": "1", "WORKER_CORES": "1",
           "WORKER_MEMORY": "2GB"}  # fmt: skip
    for iterations in (2, 3):  # the second allocation continues the first one's run
        # Not `sbatch --wait`: it polls the job's state with growing pauses; squeue here.
        job = subprocess.run(
            ["sbatch", "--parsable", "--cpus-per-task=1", "--mem=2G", f"--chdir={tmp_path}",
             f"--output={tmp_path}/driver-%j.out", str(script), "--stop-iters",
             str(iterations), "--set", "train_batch_size=64", "--num-workers", "1"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip().split(";")[0]  # fmt: skip
        deadline = time.monotonic() + 240
        while job in queued():
            assert time.monotonic() < deadline, f"job {job} did not end"
            time.sleep(0.5)
        logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("driver-*.out")))
        assert f"done: iteration {iterations}" in logs, logs[-3000:]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]


@pytest.mark.timeout(180)
def test_worker_jobs_join_over_tls_with_a_temporary_certificate(tmp_path):
    with hrl_tasks.Engine.batch(
        "slurm", 1, dict(options(tmp_path), security="temporary")
    ) as engine:
        engine.client.wait_for_workers(1, timeout=120)
        (address,) = engine.client.scheduler_info()["workers"]
        assert engine.client.scheduler.address.startswith("tls://") and address.startswith("tls://")
        assert engine.submit(len, [1, 2]).result(timeout=60) == 2
