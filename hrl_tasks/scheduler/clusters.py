"""The clusters the engine runs on: starting an embedded one, and checking others."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shlex
import sys

import dask
import psutil
from distributed import Client

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler.errors import EngineError


def count_gpus() -> int:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES, else the NVIDIA driver's list)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


CHECKED_PACKAGES = ("gymnasium", "torch", "numpy")
"""Packages whose major version must match between the driver and its workers."""


def package_versions() -> dict:
    """hrl_tasks's version and the checked packages', read from their metadata (no import
    of torch); None for a package that is not installed. Runs on the workers too."""
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    # The version of the package this process imported as hrl_tasks (loaded before any of
    # its modules, so read, not imported): a copy first on a worker's path may not be the
    # one its modules come from.
    own = getattr(sys.modules.get("hrl_tasks"), "__version__", None)
    return {"hrl_tasks": own, **{name: version(name) for name in CHECKED_PACKAGES}}


def version_mismatches(mine: dict, theirs: dict) -> list[str]:
    """What differs: hrl_tasks by version, the others by major version. Pure."""
    found = []
    for name, version in mine.items():
        other = theirs.get(name)
        if version is None:  # not installed here either
            continue
        if name == "hrl_tasks":
            same, wanted = other == version, version
        else:
            major = version.split(".")[0]
            same = other is not None and other.split(".")[0] == major
            wanted = f"{major}.x, {version} here"
        if not same:
            found.append(f"{name} {other or 'not installed'} (needs {wanted})")
    return found


def check_versions(client: Client) -> None:
    """Check that every worker has this hrl_tasks and the same major versions of
    gymnasium, torch and numpy.

    Raises:
        EngineError: naming each mismatched worker and package.
    """
    mine = package_versions()
    # A worker without hrl_tasks cannot even unpickle this function: its error says so.
    found = client.run(package_versions, on_error="return")
    wrong = {
        w: version_mismatches(mine, v)
        if isinstance(v, dict)
        else [f"hrl_tasks not importable ({type(v).__name__}: {v})"]
        for w, v in sorted(found.items())
    }
    wrong = {w: m for w, m in wrong.items() if m}
    if wrong:
        detail = "; ".join(f"{w}: {', '.join(m)}" for w, m in wrong.items())
        raise EngineError(
            f"the workers' environment does not match this one: {detail}. Install the same "
            "versions there, or upload this package with Engine.connect(..., upload=True) "
            "(--upload) if only hrl_tasks is missing."
        )


def tls_security(ca_file: str | None, cert: str | None, key: str | None):
    """A ``distributed.Security`` that requires TLS with these files (any may be None),
    for ``Engine.connect(..., security=...)``."""
    from distributed.security import Security

    return Security(
        tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True
    )


def probe_address(address: str, timeout: float = 5.0, security=None) -> None:
    """Fail within ``timeout`` if nothing listens at a tcp:// or tls:// ``address``,
    or if a tls:// scheduler's handshake fails with ``security``'s certificates
    (a ``distributed.Security``; none given fails at once for tls://).

    Dask's own client retries a refused TLS handshake until its timeout, and some
    versions wait far longer; this check answers within ``timeout`` either way.

    Raises:
        OSError: saying that nothing listens there, that it did not answer, or
            why the TLS handshake failed and what would help.
    """
    import socket

    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in ("tcp", "tls"):
        return  # another transport: Dask's own timeout applies
    if scheme == "tls" and security is None:
        raise OSError(connection_refused(address, None, "no certificates given"))
    host, _, port = rest.rpartition(":")
    try:
        raw = socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout)
    except ConnectionRefusedError:
        raise OSError(
            f"nothing listens at {address} (connection refused): is the Dask scheduler "
            "running there? Start one with `dask scheduler`, or leave out --address to use "
            "an embedded cluster"
        ) from None
    except (ValueError, OverflowError):
        raise OSError(f"{address} is not a scheduler address such as tcp://host:8786") from None
    except socket.gaierror as exc:
        raise OSError(f"the host of {address} is unknown here ({exc})") from None
    except OSError as exc:
        raise OSError(f"no answer from {address} within {timeout:g} s ({exc})") from None
    with raw:
        if scheme == "tls":
            check_tls_handshake(raw, address, security, timeout)


def check_tls_handshake(raw, address: str, security, timeout: float) -> None:
    """Shake hands over the connected socket ``raw`` as Dask's client would, and wait
    up to a second for the scheduler to refuse the client certificate (TLS 1.3 says
    so only after the handshake). Raises OSError naming the refusal."""
    import socket
    import ssl

    context = security.get_connection_args("client").get("ssl_context")
    if context is None:
        raise OSError(
            connection_refused(address, None, "the security object holds no certificates")
        )
    try:
        with context.wrap_socket(raw) as tls:
            tls.settimeout(min(1.0, timeout))
            with contextlib.suppress(socket.timeout):
                tls.recv(1)  # accepted: the scheduler's first frame, or silence
    except (ssl.SSLError, ConnectionResetError) as exc:
        raise OSError(connection_refused(address, security, exc)) from None
    except OSError as exc:
        raise OSError(f"no TLS answer from {address} within {timeout:g} s ({exc})") from None


def connection_refused(address: str, security, exc: BaseException | str) -> str:
    """Why a scheduler that listens did not take the connection, and what would help."""
    scheme = address.partition("://")[0]
    if scheme == "tls" and security is None:
        hint = (
            "a tls:// scheduler needs certificates: --tls-ca-file, --tls-cert, --tls-key "
            "(or Dask's config: distributed.comm.tls.ca-file, .client.cert, .client.key)"
        )
    elif scheme == "tls":
        hint = "the certificates were refused: are they the cluster's (its CA, a valid key)?"
    else:
        hint = "if the scheduler uses TLS, connect to tls://... with --tls-ca-file, --tls-cert, --tls-key"
    return f"could not connect to the Dask scheduler at {address} ({exc}); {hint}"


def upload_package(client: Client) -> None:
    """Copy this hrl_tasks package to every worker (present and future) through Dask's
    ``UploadDirectory`` plugin; the workers restart to import it. Its dependencies
    (torch, gymnasium...) must be installed there already."""
    import shutil
    import tempfile

    from distributed.diagnostics.plugin import UploadDirectory

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hrl_tasks/
    with tempfile.TemporaryDirectory() as staging:
        root = os.path.join(staging, "hrl_tasks_upload")
        shutil.copytree(
            package,
            os.path.join(root, "hrl_tasks"),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        client.register_plugin(dask_compat.upload_directory(UploadDirectory, root))


def local_settings() -> dict:
    """Dask settings of the embedded cluster (worker processes take them at their start)."""
    return {
        # Every lost worker reaches the engine, which retries within each task's budget.
        "distributed.scheduler.allowed-failures": 0,
        # The statistical profiler takes the GIL every 10 ms from Python-heavy
        # tasks such as env stepping (sampling ran markedly slower with it).
        "distributed.worker.profile.enabled": False,
        # Each server's event-loop tick (every 20 ms) and each nanny's memory check
        # (every 100 ms, two per worker in the driver) wake the driver's event loop
        # about 100 times a second when nothing happens; every wake-up takes the GIL
        # from the learner. Stalls of the loop (warned about after 3 s) and memory
        # overruns are still seen.
        "distributed.admin.tick.interval": "500ms",
        "distributed.worker.memory.monitor-interval": "500ms",
        # Each server (the scheduler and the nannies in the driver, each worker) keeps
        # a history of its CPU, memory and I/O for the dashboard, a sample every 500 ms,
        # by default up to an hour: it grew about 0.3 MB per 10 minutes per server for
        # that hour, which a memory soak cannot tell from a leak. 240 samples.
        "distributed.admin.system-monitor.log-length": 240,
        # Those samples (psutil: CPU, memory, network and disk counters) take about
        # 0.25 ms each, and every nanny in the driver takes its own: with 32 workers,
        # about 16 ms of the driver's CPU a second. One every 2 s (the dashboard's
        # plots move more slowly; memory limits read the memory afresh).
        "distributed.admin.system-monitor.interval": "2s",
        # Dask's logs for its own debugging (transitions, each event topic, the last
        # messages of each batched stream) keep 1,000 entries each. The messages of
        # scheduled calls carry their arguments, such as weights: the driver held
        # about 40 MB more for them with PPO's calls made through the scheduler, and
        # a quiet stream takes hours to fill its log. 100 entries each.
        "distributed.admin.low-level-log-length": 100,
        # Worker processes forked from a server that imported what they need once
        # (WORKER_PRELOAD), not spawned to import it each: on two cores, starting two
        # workers took about 1 s of CPU less. The server starts with the first cluster
        # and serves later ones too, with the environment it started with: set
        # variables that workers read at start (MALLOC_*) before the first cluster.
        # Workers restarted after a loss are spawned (this setting is not in force
        # then), with the environment of that moment.
        "distributed.worker.multiprocessing-method": "forkserver",
    }


LASTING = ("distributed.admin.low-level-log-length",)
"""Settings of ``local_settings`` that the driver's servers read after the start too (a
stream to each client that connects later, such as a worker's own client), so they hold
while the embedded cluster lives: each such stream kept 1,000 batches otherwise, and a
search's driver grew for half an hour filling them."""


class HeldSettings:
    """Dask settings set until :meth:`release`, which puts back the values from before
    unless someone changed them meanwhile."""

    def __init__(self, settings: dict):
        self.settings = dict(settings)
        self.before = {key: dask.config.get(key, None) for key in self.settings}
        dask.config.set(self.settings)

    def release(self) -> None:
        for key, value in self.settings.items():
            if dask.config.get(key, None) == value:
                dask.config.set({key: self.before[key]})
        self.settings = {}


WORKER_PRELOAD = ["distributed", "hrl_tasks.scheduler.runtime", "hrl_tasks.rollout.worker"]
"""What the server the embedded cluster's workers fork from imports once (no torch)."""


def start_local(
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    resources: dict | list[dict] | None = None,
    **cluster_kwargs,
) -> tuple:
    """Start a ``distributed.LocalCluster`` of worker processes; returns ``(cluster, client)``.

    See :meth:`hrl_tasks.Engine.local` for the arguments.
    """
    from distributed import LocalCluster

    per_worker = resources if isinstance(resources, list) else None
    if per_worker is not None:
        n_workers = len(per_worker)
    n_workers = n_workers or max(1, min(4, os.cpu_count() or 1))
    threads = threads_per_worker or 1
    memory = int(psutil.virtual_memory().total // n_workers)

    def declared(extra: dict | None) -> dict:
        base = {"CPU": threads, "memory": memory}
        gpus = count_gpus()
        if gpus:
            base["GPU"] = gpus
        return {**base, **(extra or {})}

    # This machine only: an unsecured scheduler runs whatever code reaches its port, and
    # on a shared login node others can reach every interface but the loopback.
    cluster_kwargs.setdefault("host", "127.0.0.1")
    cluster_kwargs.setdefault("dashboard_address", "127.0.0.1:0")
    # Task errors reach the caller as exceptions; the worker logs need not repeat them.
    cluster_kwargs.setdefault("silence_logs", logging.CRITICAL)
    settings = local_settings()
    if "forkserver" in multiprocessing.get_all_start_methods():
        dask_compat.preload_forkserver(WORKER_PRELOAD)
    else:  # Windows
        settings.pop("distributed.worker.multiprocessing-method")
    with dask.config.set(settings):
        try:
            cluster = LocalCluster(
                n_workers=0,
                threads_per_worker=threads,
                processes=True,
                memory_limit=memory,
                resources=None if per_worker else declared(resources),
                **cluster_kwargs,
            )
        except RuntimeError as exc:
            raise EngineError(workers_did_not_start(exc)) from exc
        try:
            cluster.new_spec = http_on_host(cluster.new_spec, cluster_kwargs["host"])
            if per_worker:
                # LocalCluster's own worker spec, for its host, protocol and security.
                (template,) = cluster.new_worker_spec().values()
                for i, extra in enumerate(per_worker):
                    nthreads = int(extra.get("CPU", threads))
                    amounts = {**declared(None), "CPU": nthreads, **extra}
                    cluster.worker_spec[f"hrl-{i}"] = worker_spec(template, nthreads, amounts)
            while len(cluster.worker_spec) < n_workers:  # as scale() names them, 0, 1, ...
                cluster.worker_spec.update(cluster.new_worker_spec())
            dask_compat.start_added_workers(cluster, alike=not per_worker)
            client = Client(cluster, direct_to_workers=True)
            client.wait_for_workers(n_workers, timeout=120)
        except RuntimeError as exc:  # a worker process that did not start
            cluster.close()
            raise EngineError(workers_did_not_start(exc)) from exc
        except BaseException:
            cluster.close()
            raise
    return cluster, client


def http_on_host(spec: dict, host: str | None) -> dict:
    """A ``SpecCluster`` worker spec whose worker serves its HTTP routes (health,
    metrics; a dashboard only if asked) on ``host``, port free, unless the spec names
    an address: distributed 2024.8's workers bind them on every interface when no
    address is given, whatever the worker's own host. Pure."""
    options = spec["options"]
    if options.get("dashboard_address") is not None or not host:
        return spec
    return {**spec, "options": {**options, "dashboard_address": f"{host}:0"}}


def worker_spec(template: dict, nthreads: int, resources: dict) -> dict:
    """A worker's spec: ``template`` (a ``SpecCluster`` worker spec, ``{"cls",
    "options"}``) with ``nthreads`` threads and ``resources`` declared; the template's
    other options (where it listens, its protocol and security) stay. Pure."""
    options = {**template["options"], "nthreads": nthreads, "resources": resources}
    return {**template, "options": options}


def workers_did_not_start(exc: BaseException) -> str:
    """Why worker processes may not have started, and the usual cure."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    hint = (
        f"; worker processes start by importing {script} again: if it starts the "
        'engine at import, put that code under `if __name__ == "__main__":`'
        if script
        else ""
    )
    return f"the embedded cluster's worker processes did not start ({exc}){hint}"


BATCH_SYSTEMS = {
    "slurm": "SLURMCluster",
    "pbs": "PBSCluster",
    "sge": "SGECluster",
    "lsf": "LSFCluster",
}
"""The batch systems ``start_batch_cluster`` knows, and dask-jobqueue's class for each
(only SLURM is tested here, on a real controller)."""


def start_batch_cluster(
    system: str, jobs: int, options: dict | None = None, resources: dict | None = None
):
    """Keep ``jobs`` worker jobs submitted through dask-jobqueue, replacing any that
    ends; returns the cluster (its workers not yet waited for).

    Settings not in ``options`` come from Dask's configuration (``jobqueue.<system>``
    in ``~/.config/dask/jobqueue.yaml`` or ``DASK_JOBQUEUE__<SYSTEM>__...``), as
    dask-jobqueue users already have them. Each worker process declares ``CPU`` = its
    threads (cores / processes), so that the engine's ledger and ``tune`` count them,
    plus ``resources`` (e.g. ``{"GPU": 1}``), passed as ``dask worker --resources``.

    Args:
        system: ``"slurm"``, ``"pbs"``, ``"sge"`` or ``"lsf"``.
        jobs: worker jobs to submit (each ``processes`` worker processes, 1 by default).
        options: keyword arguments of the dask-jobqueue class (``cores``, ``memory``,
            ``walltime``, ``queue``, ``account``, ``worker_extra_args``...);
            ``security="temporary"`` means ``distributed.Security.temporary()``.
        resources: what each worker process declares besides its CPU slots.

    Raises:
        EngineError: for an unknown system, dask-jobqueue missing, or cores and memory
            given neither here nor in Dask's configuration.
    """
    if system not in BATCH_SYSTEMS:
        raise EngineError(f"unknown batch system {system!r}; known: {', '.join(BATCH_SYSTEMS)}")
    try:
        import dask_jobqueue
    except ImportError:
        raise EngineError(
            "batch clusters need dask-jobqueue: pip install 'hrl_tasks[hpc]'"
        ) from None
    options = dict(options or {})
    configured = {k: dask.config.get(f"jobqueue.{system}.{k}", None) for k in ("cores", "memory")}
    missing = [k for k in ("cores", "memory") if options.get(k) is None and configured[k] is None]
    if missing:
        raise EngineError(
            f"a {system} worker job needs {' and '.join(missing)}: pass "
            + " ".join(f"--cluster-opt {k}={'4' if k == 'cores' else '8GB'}" for k in missing)
            + f", or set them under jobqueue.{system} in ~/.config/dask/jobqueue.yaml"
        )
    if options.get("security") == "temporary":
        from distributed.security import Security

        options["security"] = Security.temporary()
        options.setdefault("protocol", "tls://")
        # Where the job scripts find the certificate: a directory the compute nodes share.
        shared = options.setdefault(
            "shared_temp_directory", options.get("log_directory") or os.path.expanduser("~")
        )
        os.makedirs(os.path.expanduser(shared), exist_ok=True)
    cores = int(options.get("cores") or configured["cores"])
    processes = batch_processes(system, cores, options)
    declared = {"CPU": max(1, cores // processes), **(resources or {})}
    extra = list(
        options.pop("worker_extra_args", None)
        or dask.config.get(f"jobqueue.{system}.worker-extra-args", None)
        or []
    )
    extra, given = without_resources(extra)
    declared = {**declared, **given}
    # One word: dask-jobqueue joins the arguments unquoted.
    extra += ["--resources", ",".join(f"{k}={v:g}" for k, v in declared.items())]
    prologue = list(
        options.pop("job_script_prologue", None)
        or dask.config.get(f"jobqueue.{system}.job-script-prologue", None)
        or []
    )
    prologue += allocator_exports(os.environ)
    cluster = getattr(dask_jobqueue, BATCH_SYSTEMS[system])(
        worker_extra_args=extra, job_script_prologue=prologue, **options
    )
    # Adaptive with a fixed size, not scale(): a job that ends (walltime, scancel, a
    # pre-empted node) is replaced; scale() would leave it counted and gone.
    cluster.adapt(minimum_jobs=jobs, maximum_jobs=jobs)
    return cluster


def allocator_exports(environ) -> list[str]:
    """Shell lines that give worker jobs the driver's glibc allocator settings
    (``MALLOC_*``, such as ``MALLOC_MMAP_THRESHOLD_`` for long IMPALA runs, see
    docs/benchmarks.md), which PBS, SGE and LSF jobs would not inherit. Pure."""
    return [
        f"export {k}={shlex.quote(v)}"
        for k, v in sorted(environ.items())
        if k.startswith("MALLOC_")
    ]


def without_resources(args: list[str]) -> tuple[list[str], dict]:
    """``args`` without their ``--resources`` (``--resources X`` or ``--resources=X``),
    and the resources those declared. Pure."""
    rest, found, k = [], {}, 0
    while k < len(args):
        arg = str(args[k])
        if arg == "--resources" and k + 1 < len(args):
            text, k = str(args[k + 1]), k + 2
        elif arg.startswith("--resources="):
            text, k = arg.partition("=")[2], k + 1
        else:
            rest.append(args[k])
            k += 1
            continue
        for pair in text.replace(",", " ").split():
            name, _, amount = pair.partition("=")
            found[name] = float(amount)
    return rest, found


def batch_processes(system: str, cores: int, options: dict) -> int:
    """Worker processes per job, split as dask-jobqueue splits them when ``processes``
    is not given (about the square root of the cores, as ``nprocesses_nthreads``)."""
    processes = options.get("processes") or dask.config.get(f"jobqueue.{system}.processes", None)
    return int(processes) if processes else dask_compat.default_processes(cores)


def worker_processes(cluster) -> int:
    """Worker processes per job of a dask-jobqueue cluster."""
    return dask_compat.jobqueue_processes(cluster)


def job_ids(cluster) -> list[str]:
    """The batch system's ids of a dask-jobqueue cluster's worker jobs submitted so far."""
    return sorted(
        str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)
    )
