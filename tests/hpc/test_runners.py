"""The batch runner for real: every process of a run started by srun (the single-node
SLURM of `.ci/slurm-ci.sh`) or by OpenMPI's mpirun, with worker ranks killed mid-run.

In CI (``CI=true``) a missing launcher fails these; elsewhere they skip, saying why.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require_real_part

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "slurm" / "train_ppo_runner.sbatch"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4"]


@pytest.fixture
def mpi():
    missing = None if shutil.which("mpirun") else "no mpirun on PATH (apt install openmpi-bin)"
    require_real_part("MPI", missing)
    try:
        import dask_mpi  # noqa: F401
        import mpi4py  # noqa: F401
    except ImportError:
        require_real_part("MPI", "needs dask-mpi and mpi4py: pip install -e .[test]")


@pytest.fixture
def slurm():
    found = None
    if shutil.which("sinfo"):
        found = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    answers = found is not None and found.returncode == 0 and found.stdout.strip()
    missing = None if answers else "no SLURM controller answers (.ci/slurm-ci.sh start)"
    require_real_part("SLURM", missing)


def command(*args) -> list[str]:
    return [sys.executable, "-m", "hrl_tasks.cli", "train", "ppo", "--env", "CartPole-v1",
            "--no-progress", *args]  # fmt: skip


def iterations(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_iterations(out: Path, n: int, alive, timeout: float) -> None:
    """Until ``out`` has ``n`` iterations, while ``alive()`` says the run goes on."""
    deadline = time.monotonic() + timeout
    while len(iterations(out)) < n:
        assert alive() and time.monotonic() < deadline, "the run ended early"
        time.sleep(0.2)


def queued() -> set[str]:
    """The ids of the jobs SLURM holds now."""
    found = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return set(found.stdout.split())


def processes_with(variable: str, value: str) -> list[int]:
    """The pids of this machine's processes whose environment sets ``variable=value``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{variable}={value}".encode() in environ:
            found.append(int(pid))
    return found


@pytest.mark.once
@pytest.mark.timeout(240)
def test_srun_trains_ppo_to_450_and_a_killed_worker_rank_costs_only_its_work(slurm, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OUT": str(out), "SRUN_OPTS": "--overcommit"}
    # The allocation declares this machine's 2 CPUs; 4 tasks need --overcommit.
    # Not `sbatch --wait`: it polls the job's state with growing pauses (20-30 s more here).
    proc = subprocess.Popen(
        [
            "sbatch",
            "--parsable",
            "--overcommit",
            "--ntasks=4",
            "--cpus-per-task=1",
            "--mem-per-cpu=1G",
            f"--chdir={tmp_path}",
            f"--output={tmp_path}/runner-%j.out",
            str(SCRIPT),
            "--stop-iters",
            "300",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = proc.communicate(timeout=30)[0].strip().split(";")[0]
    wait_for_iterations(out, 3, lambda: job in queued(), 150)
    (scheduler_file,) = out.glob("scheduler-*.json")
    assert_strangers_are_refused(json.loads(scheduler_file.read_text())["address"])
    assert_nothing_listens_everywhere(
        [p for p in processes_with("SLURM_JOB_ID", job) if is_rank(p)]
    )
    ranks = {
        p for p in processes_with("SLURM_JOB_ID", job) if p in processes_with("SLURM_PROCID", "3")
    }
    assert ranks, "no process of worker rank 3"
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 200
    while job in queued():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.5)
    log = next(tmp_path.glob("runner-*.out")).read_text()
    assert "slurm runner: scheduler tls://" in log and "2 worker ranks" in log
    assert "done: iteration" in log, log[-3000:]
    assert iterations(out)[-1]["episode_return_mean"] >= 450, log[-3000:]
    # Nothing of the run is left outside its directory, and no process of the job.
    # (the scheduler file was under the run's directory; the scheduler removed it at its end)
    assert not list(tmp_path.glob("dask-scratch-space")) and not list(tmp_path.glob("*.json"))
    assert not list(out.glob("scheduler-*.json")) and not (out / "dask-scratch").exists()
    assert not list(tmp_path.glob(".hrl-*")) and not list(out.glob(".hrl-*"))  # the run's key too
    assert not processes_with("SLURM_JOB_ID", job)


@pytest.mark.timeout(240)
def test_a_rank_killed_under_mpirun_ends_the_run_in_one_line_and_resume_trains_to_450(
    mpi, tmp_path
):
    out = tmp_path / "run"
    argv = ["--runner", "mpi", "--out", str(out), "--checkpoint-every", "1"]
    proc = subprocess.Popen([*MPIRUN, *command(*argv, "--stop-iters", "1000")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for_iterations(out, 2, lambda: proc.poll() is None, 120)
    victims = [p for p in processes_with("OMPI_COMM_WORLD_RANK", "3")
               if p in processes_with("OMPI_COMM_WORLD_SIZE", "4")]  # fmt: skip
    assert victims, "no process of worker rank 3"
    os.kill(victims[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    ours = [line for line in stderr.splitlines() if line.startswith("hrl-tasks:")]
    assert len(ours) == 1, stderr[-3000:]
    assert "mpirun ended the run: worker rank 3 died" in ours[0]
    assert f"`--resume {out}` continues from checkpoint-" in ours[0]
    saved = max(int(p.stem.split("-")[1]) for p in (out / "checkpoints").glob("checkpoint-*.hrl"))
    done = subprocess.run([*MPIRUN, *command("--runner", "mpi", "--resume", str(out),
                                             "--stop-reward", "450", "--stop-iters", "300")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=170)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mpi runner: scheduler tls://" in done.stdout and "2 worker ranks" in done.stdout
    resumed = [r for r in iterations(out) if r["iteration"] > saved]
    assert resumed[0]["iteration"] == saved + 1  # from the checkpoint, nothing repeated
    assert resumed[-1]["episode_return_mean"] >= 450


def scratch_dirs() -> set[Path]:
    """The workers' scratch directories in this machine's temporary directory."""
    import tempfile

    return set((Path(tempfile.gettempdir()) / "dask-scratch-space").glob("worker-*"))


@pytest.mark.once
@pytest.mark.timeout(180)
def test_two_mpiruns_and_an_embedded_run_at_once_collide_in_nothing_and_leave_nothing(
    mpi, tmp_path
):
    import uuid

    before = scratch_dirs()
    runs = []
    for way in ("mpi", "mpi", "embedded"):
        tag = uuid.uuid4().hex  # inherited by every process of the run
        out = tmp_path / f"{way}-{len(runs)}"
        argv = command("--stop-iters", "2", "--out", str(out))
        if way == "mpi":
            argv = [*MPIRUN, *argv, "--runner", "mpi"]
        env = {**os.environ, "HRL_RUN_TAG": tag}
        # Open MPI's own session directory, one per mpirun: two started at once race to
        # create the shared /tmp/ompi.<host>.<uid> ("orte_init failed ... File exists").
        session = tmp_path / f"ompi-{len(runs)}"
        session.mkdir()
        env["OMPI_MCA_orte_tmpdir_base"] = env["PRTE_MCA_prte_tmpdir_base"] = str(session)
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        runs.append((tag, out, proc))
    for tag, out, proc in runs:
        _, stderr = proc.communicate(timeout=150)
        assert proc.returncode == 0, stderr[-3000:]
        assert [r["iteration"] for r in iterations(out)] == [1, 2]
        deadline = time.monotonic() + 10  # a worker may take a moment to exit after its run
        while processes_with("HRL_RUN_TAG", tag) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_with("HRL_RUN_TAG", tag), "a process of the run outlived it"
        assert not (out / "dask-scratch").exists()
    assert scratch_dirs() <= before


def files_of(path: Path) -> dict:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


@pytest.mark.once
@pytest.mark.timeout(300)
def test_under_mpirun_every_rank_takes_the_directory_the_scheduler_rank_chose(mpi, tmp_path):
    names = ["ppo-CartPole-v1", "ppo-CartPole-v1-2"]
    for name in names:  # the README's way, twice: each run its own directory
        done = subprocess.run(
            [*MPIRUN, *command("--runner", "mpi", "--stop-iters", "1")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert [r["iteration"] for r in iterations(tmp_path / "runs" / name)] == [1]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == names  # no note left
    first = tmp_path / "runs" / names[0]
    before = files_of(first)
    refused = subprocess.run(
        [*MPIRUN, *command("--runner", "mpi", "--stop-iters", "1", "--out", str(first))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0
    assert f"{first} holds another run's files" in refused.stderr
    assert files_of(first) == before


def is_rank(pid: int) -> bool:
    """Whether ``pid`` is a Python process running hrl-tasks, as ``python -m
    hrl_tasks.cli`` or the ``hrl-tasks`` script (not its launcher, nor the driver's
    curve process)."""
    return python_running(pid, b"hrl_tasks.cli") or python_running(pid, b"hrl-tasks")


def python_running(pid: int, program: bytes) -> bool:
    """Whether ``pid`` is a Python process running ``program``: a module
    (``python -m program``) or a script of that name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    scripts = [arg.rpartition(b"/")[2] for arg in argv[1:3]]
    return "python" in Path(argv[0].decode()).name and program in scripts


def assert_strangers_are_refused(address: str) -> None:
    """A plain-TCP client, and a TLS client with a certificate not the run's, both fail
    to reach the scheduler at ``address`` (``tls://host:port``)."""
    from distributed import Client
    from distributed.security import Security

    assert address.startswith("tls://"), address
    for scheme, security in (("tcp", None), ("tls", Security.temporary())):
        with pytest.raises((OSError, TimeoutError)):
            Client(f"{scheme}://{address[len('tls://') :]}", security=security, timeout=5)


def assert_nothing_listens_everywhere(pids: list[int]) -> None:
    """No process of ``pids`` listens on every interface (0.0.0.0 or ::)."""
    import psutil

    assert pids
    everywhere = []
    for pid in pids:
        try:
            sockets = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        everywhere += [
            (pid, c.laddr)
            for c in sockets
            if c.status == psutil.CONN_LISTEN and c.laddr.ip in ("0.0.0.0", "::")
        ]
    assert not everywhere, f"listening on every interface: {everywhere}"


@pytest.mark.once
@pytest.mark.timeout(240)
def test_under_mpirun_the_run_listens_on_one_interface_and_refuses_strangers(mpi, tmp_path):
    import uuid

    tag = uuid.uuid4().hex
    out = tmp_path / "run"
    # MPI's own sockets (mpirun's, and the TCP transport's on every interface unless
    # btl_tcp_if_include says otherwise) are the MPI library's: this run's ranks share
    # one node and memory, so the transport is left out and every socket seen is ours.
    mpirun = [*MPIRUN, "--mca", "btl", "self,vader"]
    proc = subprocess.Popen(
        [*mpirun, *command("--runner", "mpi", "--out", str(out), "--stop-iters", "1000")],
        cwd=tmp_path,
        env={**os.environ, "HRL_RUN_TAG": tag},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("mpi runner: scheduler tls://"), first
        assert "(TLS with a certificate made for this run)" in first
        wait_for_iterations(out, 1, lambda: proc.poll() is None, 120)
        assert_strangers_are_refused(first.split()[3])
        ranks = [p for p in processes_with("HRL_RUN_TAG", tag) if is_rank(p)]
        assert len(ranks) == 4
        tagged = processes_with("HRL_RUN_TAG", tag)
        curves = [p for p in tagged if python_running(p, b"hrl_tasks.plotting")]
        assert len(curves) == 1  # the driver's rank draws; the others start none
        assert_nothing_listens_everywhere(ranks)
        assert not list(out.glob(".hrl-*")) and not list(tmp_path.glob(".hrl-*"))
    finally:
        proc.terminate()  # mpirun ends every rank
        proc.wait(timeout=60)


@pytest.mark.once
@pytest.mark.timeout(240)
def test_no_tls_is_plain_tcp_and_says_what_it_exposes(mpi, tmp_path):
    done = subprocess.run(
        [*MPIRUN, *command("--runner", "mpi", "--no-tls", "--stop-iters", "1")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mpi runner: scheduler tcp://" in done.stdout and "(plain TCP)" in done.stdout
    assert "--no-tls: this run's scheduler and workers speak plain TCP" in done.stderr
    assert "can run code as you" in done.stderr
