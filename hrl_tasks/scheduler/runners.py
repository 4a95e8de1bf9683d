"""The batch runner: every process of a run started inside one allocation.

On many HPC systems compute nodes cannot submit jobs, so dask-jobqueue's way
(the driver submits worker jobs) is closed; instead the job script starts the
same command on every task of its allocation::

    srun hrl-tasks train ppo ... --runner slurm          # dask-jobqueue's SLURMRunner
    mpirun -n 4 hrl-tasks train ppo ... --runner mpi     # dask-mpi

Rank 0 runs the scheduler, rank 1 the driver (the run itself), every other rank
a worker. The scheduler and worker ranks serve until the driver ends the run,
then their processes exit; only the driver returns from `join_allocation`.

Nothing of a run is shared with another run on the same nodes: every port is
free when taken (or from ``--ports``), and temporary and spill files go under
the run's directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import NamedTuple

from hrl_tasks.scheduler.errors import EngineError

RUNNERS = ("slurm", "mpi")
SCHEDULER_RANK, DRIVER_RANK = 0, 1


class Allocation(NamedTuple):
    """What the driver rank knows of its allocation."""

    system: str
    address: str  # the scheduler's
    workers: int  # worker ranks
    close: object  # ends the scheduler and so every worker rank
    security: object = None  # the run's distributed.Security; None without TLS


def rank_and_size(system: str, environ) -> tuple[int, int]:
    """This process's rank and the number of ranks, from the launcher's environment
    (``SLURM_PROCID``/``SLURM_NTASKS``; OpenMPI's ``OMPI_COMM_WORLD_*``, else PMI's).
    Pure.

    Raises:
        EngineError: if the launcher's variables are missing (not started by srun or
            mpirun), naming them and the command that sets them.
    """
    names = {
        "slurm": [("SLURM_PROCID", "SLURM_NTASKS")],
        "mpi": [
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "PMI_SIZE"),
            ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"),
        ],
    }[system]
    for rank, size in names:
        if rank in environ and size in environ:
            return int(environ[rank]), int(environ[size])
    launcher = (
        "srun hrl-tasks ... --runner slurm"
        if system == "slurm"
        else ("mpirun -n 4 hrl-tasks ... --runner mpi")
    )
    raise EngineError(
        f"--runner {system} starts every process of the run, so it runs under its launcher "
        f"({launcher}); {' or '.join('/'.join(pair) for pair in names)} are not set here"
    )


def check_world(system: str, size: int) -> None:
    """At least three ranks: the scheduler, the driver and one worker. Pure."""
    if size < 3:
        raise EngineError(
            f"--runner {system} needs at least 3 ranks (scheduler, driver, one worker); "
            f"this allocation has {size}: "
            + ("srun -n 4 ..." if system == "slurm" else "mpirun -n 4 ...")
        )


JOB_KEYS = {
    "slurm": (("SLURM_JOB_ID", "SLURM_STEP_ID"),),
    "mpi": (("PMIX_NAMESPACE",), ("OMPI_MCA_ess_base_jobid",), ("PMI_KVSNAME",)),
}
"""What names one run of a launcher: SLURM's job and step; mpirun's job (PMIx's
namespace, OpenMPI's job id, or MPICH's key-value space)."""
DECISION_WAIT_S = 120.0  # how long a rank waits for the scheduler's rank's decision


def job_key(system: str, environ) -> str:
    """The key of this run of the launcher, the same on every rank. Pure.

    Raises:
        EngineError: if the launcher set none of `JOB_KEYS`.
    """
    for names in JOB_KEYS[system]:
        if all(name in environ for name in names):
            return "-".join(environ[name] for name in names).replace("/", "_")
    raise EngineError(
        f"--runner {system}: none of {', '.join('+'.join(n) for n in JOB_KEYS[system])} is "
        "set, so the ranks cannot tell this run from another: start it with "
        + ("srun" if system == "slurm" else "mpirun")
    )


def decision_file(system: str, where: Path, topic: str = "run") -> Path:
    """Where the scheduler's rank leaves a decision about this run for the other ranks."""
    return where / f".hrl-{topic}-{job_key(system, os.environ)}.json"


def decided_once(system: str, where: Path, decide, topic: str = "run"):
    """A decision about the run that every rank of it shares (its output directory,
    its certificate): the scheduler's rank calls ``decide()`` and leaves the answer,
    a JSON value (or the message of the ``ValueError`` it raised), in `decision_file`
    under ``where``, readable by the user alone; the others wait for it and read it.
    The driver removes the file once every rank has joined (`forget_decision`).

    Raises:
        ValueError: with ``decide``'s message, on every rank, if it raised one.
        EngineError: if the scheduler's rank left nothing within `DECISION_WAIT_S`.
    """
    import json
    import time

    rank, _ = rank_and_size(system, os.environ)
    note = decision_file(system, where, topic)
    if rank == SCHEDULER_RANK:
        try:
            answer = {"value": decide()}
        except ValueError as exc:
            answer = {"error": str(exc)}
        where.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f"{note.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a key may be in it
        with os.fdopen(fd, "w") as f:
            json.dump(answer, f)
        os.replace(tmp, note)
    else:
        deadline = time.monotonic() + DECISION_WAIT_S
        while not note.exists():
            if time.monotonic() > deadline:
                raise EngineError(
                    f"--runner {system}: the scheduler's rank (rank {SCHEDULER_RANK}) left no "
                    f"decision in {note} within {DECISION_WAIT_S:g} s; do all ranks see the "
                    "same file system there?"
                )
            time.sleep(0.1)
        answer = json.loads(note.read_text())
    if "error" in answer:
        raise ValueError(answer["error"])
    return answer["value"]


def forget_decision(system: str, where: Path, topic: str = "run") -> None:
    """Remove the run's `decision_file` (every rank has read it once all have joined)."""
    try:
        note = decision_file(system, where, topic)
    except EngineError:  # no job key: no decision was left
        return
    note.unlink(missing_ok=True)


def free_port(ports: str | None) -> int:
    """A port free on this host now: any (0 is left to the system) or the first free
    one of ``LOW:HIGH``.

    Raises:
        EngineError: if no port of the range is free.
    """
    if not ports:
        return 0
    import socket

    low, _, high = ports.partition(":")
    for port in range(int(low), int(high or low) + 1):
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return port
    raise EngineError(f"--ports {ports}: every port of the range is taken on this node")


def join_allocation(
    system: str,
    run_dir: Path,
    threads: int = 1,
    ports: str | None = None,
    interface: str | None = None,
    tls: bool = True,
):
    """Take this process's part in the run: on the driver rank return an `Allocation`;
    on the others serve as scheduler or worker until the driver ends the run, then
    exit the process.

    Args:
        system: ``"slurm"`` (dask-jobqueue's ``SLURMRunner``) or ``"mpi"`` (dask-mpi).
        run_dir: the run's directory: the scheduler file, the run's certificate (until
            every rank has joined) and the workers' temporary and spill files go under
            it (never shared with another run).
        threads: threads per worker, each declared as one ``CPU``.
        ports: ``LOW:HIGH`` to take every port from (a site's firewall), else free ones.
        interface: the network interface every rank listens on (default: see
            `hrl_tasks.scheduler.runner_network`).
        tls: every connection of the run requires TLS with a certificate made for it.
    """
    import dask

    from hrl_tasks.scheduler import runner_network as net

    rank, size = rank_and_size(system, os.environ)
    check_world(system, size)
    network = net.RunNetwork(
        *decided_once(system, run_dir, lambda: net.new_run_network(interface, tls), "network")
    )
    host = (
        network.scheduler_host
        if rank == SCHEDULER_RANK
        else (net.rank_host(interface, network.scheduler_host))
    )
    if not tls and rank == SCHEDULER_RANK:
        print(f"hrl-tasks: warning: {net.NO_TLS_WARNING.format(host=host)}", file=sys.stderr)
    dask.config.set(net.tls_settings(network))  # every connection of this process, Dask's own too
    security = net.run_security(network)
    scratch = run_dir / "dask-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    worker_options = {
        "nthreads": threads,
        "resources": {"CPU": threads},
        "local_directory": str(scratch),
        "host": host,
        "security": security,
    }  # each worker is named by its rank
    if ports:
        worker_options["port"] = ports
    dashboard = f"{host}:{free_port(ports) if rank == SCHEDULER_RANK else 0}"
    listen = Listen(host, "tls" if tls else "tcp", security, dashboard)
    if system == "slurm":
        allocation = slurm_runner(run_dir, rank, size, worker_options, listen, ports)
    else:
        allocation = mpi_runner(rank, size, worker_options, listen)
    end = allocation.close

    def close() -> None:
        end()
        shutil.rmtree(scratch, ignore_errors=True)  # what the workers left: the run is over

    return allocation._replace(close=close, security=security)


class Listen(NamedTuple):
    """How the scheduler's rank listens: host, protocol, security, dashboard address."""

    host: str
    protocol: str
    security: object
    dashboard: str


def slurm_runner(
    run_dir: Path, rank: int, size: int, worker_options: dict, listen: Listen, ports: str | None
):
    try:
        from dask_jobqueue.slurm import SLURMRunner
    except ImportError:
        raise EngineError(
            "--runner slurm needs dask-jobqueue: pip install 'hrl_tasks[hpc]'"
        ) from None
    before = signal.getsignal(signal.SIGINT)  # dask_jobqueue.runner replaces it at import
    job = os.environ.get("SLURM_JOB_ID", "0")
    scheduler_file = run_dir / f"scheduler-{job}-{os.environ.get('SLURM_STEP_ID', '0')}.json"
    if rank == SCHEDULER_RANK:
        scheduler_file.unlink(missing_ok=True)  # a file of an earlier step: not this one's
    else:
        whole_json(scheduler_file, DECISION_WAIT_S)
    runner = SLURMRunner(
        scheduler_file=str(scheduler_file),
        scheduler_options={
            "port": free_port(ports),
            "dashboard_address": listen.dashboard,
            "host": listen.host,
            "protocol": listen.protocol,
            "security": listen.security,
        },
        worker_options=worker_options,
    )
    # Only the driver gets here; the other ranks served and exited.
    signal.signal(signal.SIGINT, before)
    # The runner's own way to end the scheduler (an rpc without the run's certificate)
    # cannot speak TLS: `end_run` ends it through a client instead.
    runner.scheduler_comm = None

    def close() -> None:
        end_run(runner.scheduler_address, listen.security)
        runner.close()

    return Allocation("slurm", runner.scheduler_address, size - 2, close)


def whole_json(path: Path, wait_s: float) -> None:
    """Wait until ``path`` holds a whole JSON document, for at most ``wait_s``: Dask's
    scheduler writes its file in place, and a rank that read it half-written ended the
    run with "Expecting value" (dask-jobqueue's runner reads it as soon as it exists)."""
    import json
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            json.loads(path.read_text())
            return
        except (OSError, ValueError):  # not there yet, or half-written
            time.sleep(0.1)


def end_run(address: str, security=None, shutdown: bool = True) -> None:
    """End the worker ranks, then (``shutdown``) the scheduler, so that each worker
    does not print the broken connection."""
    from distributed import Client

    try:
        with Client(address, timeout=10, security=security) as client:
            client.retire_workers(close_workers=True, remove=True)
            if shutdown:
                client.shutdown()
    except (OSError, TimeoutError):
        pass  # the scheduler is gone already: so are the workers


def mpi_runner(rank: int, size: int, worker_options: dict, listen: Listen):
    try:
        import dask_mpi
    except ImportError:
        raise EngineError(
            "--runner mpi needs dask-mpi and mpi4py: pip install 'hrl_tasks[mpi]' (mpi4py "
            "builds against the MPI on PATH)"
        ) from None
    from hrl_tasks.scheduler.runner_network import interface_of

    options = {k: v for k, v in worker_options.items() if k not in ("nthreads", "local_directory")}
    dask_mpi.initialize(  # its scheduler takes an interface and Dask's configured security
        interface=interface_of(listen.host) if rank == SCHEDULER_RANK else None,
        protocol=listen.protocol,
        nthreads=worker_options["nthreads"],
        local_directory=worker_options["local_directory"],
        dashboard_address=listen.dashboard,
        worker_options=options,
        exit=True,
    )
    import dask

    def close() -> None:
        address = dask.config.get("scheduler_address")
        end_run(address, listen.security, shutdown=False)
        dask_mpi.send_close_signal()  # the scheduler ends
        from mpi4py import MPI

        if not MPI.Is_finalized():  # mpirun calls a rank that ends without it a failure
            MPI.Finalize()

    return Allocation("mpi", dask.config.get("scheduler_address"), size - 2, close)


# How OpenMPI 4.1's mpirun ends the other ranks when one dies (seen with strace): SIGCONT
# at once, SIGTERM 1 s later (odls_base_sigkill_timeout), SIGKILL some 20 ms after that.
# The driver's line must be out before the SIGKILL, so the SIGCONT is its cue: it waits
# at most this long for the dead rank's name, then prints and ends.
LOST_RANK_WAIT_S = 0.5
WATCH_S = 0.1  # how often the driver looks at its workers under mpirun


def lost_ranks(initial: dict, live: list) -> list[str]:
    """The names (ranks) of the workers of ``initial`` (address -> name) not ``live``. Pure."""
    return sorted(str(name) for address, name in initial.items() if address not in set(live))


def ends_the_run(signals: bytes, gone: list) -> bool:
    """Whether the signals read from the wakeup file (one byte each, its number) are
    mpirun ending the run: a SIGTERM, or a SIGCONT while a worker rank is gone (a SIGCONT
    alone is a stopped run continuing). Pure."""
    return signal.SIGTERM in signals or (signal.SIGCONT in signals and bool(gone))


def end_on_lost_rank(engine, run_dir: Path) -> None:
    """Under mpirun, which ends every rank when one dies (SIGCONT, then SIGTERM 1 s
    later and SIGKILL right after it): the driver says in one line which worker rank
    died first and how to go on, and its process ends.

    The signals are read by a thread from the signal module's wakeup file, written by
    the C-level handler as each arrives: a Python handler would run only when the main
    thread next runs Python code, which a long update can put past the SIGKILL."""
    import socket
    import threading
    import time

    initial = {
        address: info.get("name")
        for address, info in engine.client.scheduler_info()["workers"].items()
    }
    first_lost: list[str] = []  # the ranks seen gone before mpirun's signals

    def gone_now() -> list[str]:
        try:
            return lost_ranks(initial, engine.worker_addresses())
        except Exception:  # the client is closing: the run is ending anyway
            return []

    def watch() -> None:
        while not first_lost and engine.client.status in ("running", "connecting"):
            first_lost.extend(gone_now())
            time.sleep(WATCH_S)

    def gone_within(wait_s: float) -> list[str]:
        deadline = time.monotonic() + wait_s
        gone = list(first_lost) or gone_now()
        while not gone and time.monotonic() < deadline:
            time.sleep(0.05)
            gone = list(first_lost) or gone_now()
        return gone

    def report(gone: list[str]) -> None:
        kept = sorted((run_dir / "checkpoints").glob("checkpoint-*.hrl"))
        what = f"worker rank {', '.join(gone)} died" if gone else "a rank ended"
        last = f"from {kept[-1].name}" if kept else "from the start: no checkpoint was saved"
        print(
            f"hrl-tasks: error: mpirun ended the run: {what}; `--resume {run_dir}` continues "
            f"{last}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    received, wakeup = socket.socketpair()
    wakeup.setblocking(False)

    def on_signals() -> None:
        with received, wakeup:  # this thread keeps both ends open (the signal module has a number)
            while True:
                signals = received.recv(64)
                wait_s = 0.0 if signal.SIGTERM in signals else LOST_RANK_WAIT_S
                gone = gone_within(wait_s) if signal.SIGCONT in signals else list(first_lost)
                if ends_the_run(signals, gone):
                    report(gone)

    for number in (signal.SIGCONT, signal.SIGTERM):
        signal.signal(number, lambda *_: None)  # the C handler writes the wakeup file
    signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=watch, name="hrl-tasks-ranks", daemon=True).start()
    threading.Thread(target=on_signals, name="hrl-tasks-signals", daemon=True).start()
