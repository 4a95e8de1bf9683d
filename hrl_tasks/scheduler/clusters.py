"""The clusters the engine runs on: starting an embedded one, and checking others."""

from __future__ import annotations

import logging
import os
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


def check_versions(client: Client) -> None:
    """Check that the workers can import this package, at this version."""
    import hrl_tasks

    def version():
        try:
            import hrl_tasks as remote

            return remote.__version__
        except ImportError:
            return None

    found = client.run(version)
    wrong = {w: v for w, v in found.items() if v != hrl_tasks.__version__}
    if wrong:
        detail = ", ".join(f"{w}: {v or 'not installed'}" for w, v in sorted(wrong.items()))
        raise EngineError(
            f"hrl_tasks {hrl_tasks.__version__} is needed on every worker, found {detail}. "
            "Install the same version in the workers' environment."
        )


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
        # that hour, which a memory soak cannot tell from a leak. Two minutes of it.
        "distributed.admin.system-monitor.log-length": 240,
        # Dask's logs for its own debugging (transitions, each event topic, the last
        # messages of each batched stream) keep 1,000 entries each. The messages of
        # scheduled calls carry their arguments, such as weights: the driver held
        # about 40 MB more for them with PPO's calls made through the scheduler, and
        # a quiet stream takes hours to fill its log. 100 entries each.
        "distributed.admin.low-level-log-length": 100,
    }


def start_local(
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    resources: dict | list[dict] | None = None,
    **cluster_kwargs,
) -> tuple:
    """Start a ``distributed.LocalCluster`` of worker processes; returns ``(cluster, client)``.

    See :meth:`hrl_tasks.Engine.local` for the arguments.
    """
    from distributed import LocalCluster, Nanny

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

    cluster_kwargs.setdefault("dashboard_address", ":0")
    # Task errors reach the caller as exceptions; the worker logs need not repeat them.
    cluster_kwargs.setdefault("silence_logs", logging.CRITICAL)
    with dask.config.set(local_settings()):
        try:
            cluster = LocalCluster(
                n_workers=0 if per_worker else n_workers,
                threads_per_worker=threads,
                processes=True,
                memory_limit=memory,
                resources=None if per_worker else declared(resources),
                **cluster_kwargs,
            )
        except RuntimeError as exc:
            raise EngineError(workers_did_not_start(exc)) from exc
        try:
            if per_worker:
                for i, extra in enumerate(per_worker):
                    nthreads = int(extra.get("CPU", threads))
                    cluster.worker_spec[f"hrl-{i}"] = {
                        "cls": Nanny,
                        "options": {
                            "nthreads": nthreads,
                            "memory_limit": memory,
                            "resources": {**declared(None), "CPU": nthreads, **extra},
                        },
                    }
                dask_compat.start_added_workers(cluster)
            client = Client(cluster, direct_to_workers=True)
            client.wait_for_workers(n_workers, timeout=120)
        except BaseException:
            cluster.close()
            raise
    return cluster, client


def workers_did_not_start(exc: BaseException) -> str:
    """Why worker processes may not have started, and the usual cure."""
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    hint = (
        f"; worker processes start by importing {script} again (spawn): if it starts the "
        'engine at import, put that code under `if __name__ == "__main__":`'
        if script
        else ""
    )
    return f"the embedded cluster's worker processes did not start ({exc}){hint}"
