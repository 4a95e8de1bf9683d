"""The batch runner's decisions, without a launcher: ranks, world size, ports."""

import signal
import socket

import pytest

from hrl_tasks.scheduler import EngineError
from hrl_tasks.scheduler.runners import (
    check_world,
    ends_the_run,
    free_port,
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
