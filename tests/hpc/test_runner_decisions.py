"""The batch runner's decisions, without a launcher: ranks, world size, ports."""

import signal
import socket

import pytest

from hrl_tasks.scheduler import EngineError, runners
from hrl_tasks.scheduler.runners import (
    check_world,
    decided_once,
    ends_the_run,
    forget_decision,
    free_port,
    job_key,
    lost_ranks,
    rank_and_size,
)


def test_ranks_come_from_the_launchers_environment():
    assert rank_and_size("slurm", {"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}) == (2, 4)
    assert rank_and_size("mpi", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}) == (
        1,
        4,
    )
    assert rank_and_size("mpi", {"PMI_RANK": "3", "PMI_SIZE": "5"}) == (3, 5)
    with pytest.raises(EngineError, match=r"runs under its launcher \(srun hrl-tasks"):
        rank_and_size("slurm", {})
    with pytest.raises(EngineError, match="mpirun -n 4"):
        rank_and_size("mpi", {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"})


def test_a_world_needs_a_scheduler_a_driver_and_a_worker():
    check_world("slurm", 3)
    with pytest.raises(EngineError, match="needs at least 3 ranks.*has 2: srun -n 4"):
        check_world("slurm", 2)


def test_ports_are_free_ones_or_the_first_free_one_of_the_range():
    assert free_port(None) == 0
    with socket.socket() as taken:
        taken.bind(("", 0))
        port = taken.getsockname()[1]
        assert free_port(f"{port}:{port + 20}") > port
        with pytest.raises(EngineError, match="every port of the range is taken"):
            free_port(str(port))


def test_the_dead_ranks_are_the_workers_no_longer_seen():
    initial = {"tcp://h:1": 2, "tcp://h:2": 3}
    assert lost_ranks(initial, ["tcp://h:1"]) == ["3"]
    assert lost_ranks(initial, list(initial)) == []


def test_mpiruns_sigcont_ends_the_run_only_with_a_rank_gone_and_its_sigterm_always():
    # mpirun ends the ranks with SIGCONT, SIGTERM 1 s later, SIGKILL right after it.
    cont, term = bytes([signal.SIGCONT]), bytes([signal.SIGTERM])
    assert ends_the_run(cont, ["3"])
    assert not ends_the_run(cont, [])  # a stopped run that continues
    assert ends_the_run(term, []) and ends_the_run(cont + term, [])
    assert not ends_the_run(bytes([signal.SIGINT]), ["3"])


def test_a_run_of_a_launcher_has_one_key_on_every_rank():
    assert job_key("slurm", {"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "2"}) == "17-2"
    assert job_key("mpi", {"PMIX_NAMESPACE": "1362886657", "PMI_KVSNAME": "x"}) == "1362886657"
    assert job_key("mpi", {"PMI_KVSNAME": "kvs/8_0"}) == "kvs_8_0"
    with pytest.raises(EngineError, match="SLURM_JOB_ID\\+SLURM_STEP_ID"):
        job_key("slurm", {"SLURM_JOB_ID": "17"})


def as_rank(monkeypatch, rank: int) -> None:
    monkeypatch.setenv("SLURM_PROCID", str(rank))
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("SLURM_STEP_ID", "0")


def test_the_scheduler_rank_decides_and_the_others_read_its_answer(tmp_path, monkeypatch):
    as_rank(monkeypatch, 0)
    assert decided_once("slurm", tmp_path, lambda: "runs/ppo-2") == "runs/ppo-2"
    as_rank(monkeypatch, 3)

    def never() -> str:
        raise AssertionError("only the scheduler's rank decides")

    assert decided_once("slurm", tmp_path, never) == "runs/ppo-2"
    forget_decision("slurm", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_reaches_every_rank(tmp_path, monkeypatch):
    def refuse() -> str:
        raise ValueError("runs/ppo holds another run's files")

    as_rank(monkeypatch, 0)
    with pytest.raises(ValueError, match="holds another run's files"):
        decided_once("slurm", tmp_path, refuse)
    as_rank(monkeypatch, 2)
    with pytest.raises(ValueError, match="holds another run's files"):
        decided_once("slurm", tmp_path, refuse)


def test_a_rank_that_gets_no_answer_says_where_it_looked(tmp_path, monkeypatch):
    as_rank(monkeypatch, 1)
    monkeypatch.setattr(runners, "DECISION_WAIT_S", 0.3)
    with pytest.raises(EngineError, match=r"left no decision in .*\.hrl-run-17-0\.json"):
        decided_once("slurm", tmp_path, lambda: "unused")
