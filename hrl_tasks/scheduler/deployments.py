"""The deployment forms: where an engine's cluster comes from.

Each function builds the cluster (or reaches it) and then the engine, as
``Engine.local``, ``Engine.connect``, ``Engine.from_cluster``, ``Engine.batch`` and
``Engine.from_gateway`` (those are these functions, bound to :class:`Engine`:
``cls`` is the engine class). The task and object API is the engine's own
(:mod:`~hrl_tasks.scheduler.engine`).
"""

from __future__ import annotations

import functools

from dask.typing import no_default
from distributed import Client
from distributed.security import Security

from hrl_tasks.scheduler.clusters import (
    LASTING,
    HeldSettings,
    check_versions,
    connection_refused,
    local_settings,
    probe_address,
    start_local,
    upload_package,
)
from hrl_tasks.scheduler.errors import EngineError
from hrl_tasks.scheduler.runtime import DeclareThreads


def local(
    cls,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    resources: dict | list[dict] | None = None,
    validate: bool | None = None,
    stall_warning_s: float | None = no_default,
    route: str | None = None,
    **cluster_kwargs,
):
    """Start an embedded ``distributed.LocalCluster`` with worker processes.

    Args:
        n_workers: worker processes (default: one per core, at most 4).
        threads_per_worker: threads in each (default 1).
        resources: what each worker declares. Default: ``CPU`` = its
            threads, ``GPU`` = the devices visible, ``memory`` = its
            memory limit in bytes. A list gives one dict per worker, for a
            heterogeneous cluster (its length sets ``n_workers``).
        validate, stall_warning_s, route: as for :class:`Engine`.
        **cluster_kwargs: passed to ``LocalCluster`` (e.g. ``dashboard_address``,
            ``protocol`` and ``security``). The scheduler, its dashboard, every
            worker and nanny listen on 127.0.0.1 unless ``host`` says otherwise.
    """
    held = HeldSettings({key: local_settings()[key] for key in LASTING})
    try:
        cluster, client = start_local(n_workers, threads_per_worker, resources, **cluster_kwargs)
    except BaseException:
        held.release()
        raise
    try:
        engine = cls(
            client,
            cluster=cluster,
            validate=validate,
            stall_warning_s=stall_warning_s,
            route=route,
        )
    except BaseException:
        client.close()
        cluster.close()
        held.release()
        raise
    engine.held_settings = held
    return engine


def connect(
    cls,
    address: str,
    timeout: float = 30,
    *,
    security=None,
    upload: bool = False,
    **engine_kwargs,
):
    """Use an existing cluster by its scheduler address, e.g. ``tcp://host:8786``.

    The workers must have this hrl_tasks and the same major versions of
    gymnasium, torch and numpy; that is checked at once.

    Args:
        address: the scheduler's address (``tls://`` with ``security``).
        timeout: seconds to wait for the scheduler to answer.
        security: a ``distributed.Security`` (TLS certificates), as for Dask's Client;
            None: Dask's configured one (``distributed.comm.tls.*``), as Dask's
            Client takes it.
        upload: copy this package to the workers first (Dask's ``UploadDirectory``
            plugin), for workers that have its dependencies but not it.
        **engine_kwargs: as for :class:`Engine` (``retries``, ``lost_worker_timeout``).

    Raises:
        OSError: if nothing listens at ``address`` (within 5 s), or the scheduler
            does not answer within ``timeout``, or refuses the connection (TLS).
        EngineError: naming each worker whose environment does not match.
    """
    if security is None:
        security = Security()  # reads distributed.comm.tls.* from dask.config
    probe_address(address, timeout=min(5.0, timeout), security=security)
    try:
        client = Client(address, timeout=timeout, security=security)
    except Exception as exc:  # no answer, TLS without or with wrong certificates, or a
        # failed start of the client's event loop after such failures (distributed)
        raise OSError(connection_refused(address, security, exc)) from exc
    try:
        if upload:
            upload_package(client)
        check_versions(client)
    except BaseException:
        client.close()
        raise
    return cls(client, **engine_kwargs)


def from_cluster(cls, cluster, *, close_cluster: bool = False, **engine_kwargs):
    """Use any Dask cluster object (``LocalCluster``, dask-jobqueue's ``SLURMCluster``...).

    Workers that join later (``cluster.scale(n)``, ``cluster.adapt(...)``, a
    replacement for a job that ended) are used as they come; stateful workers lost
    with a job are re-created on the others or on its replacement.

    Args:
        cluster: the cluster; its workers may still be starting.
        close_cluster: close it when the engine closes (by default it stays open
            and you close it).
        **engine_kwargs: as for :class:`Engine`.
    """
    client = Client(cluster)
    try:
        engine = cls(client, cluster=cluster if close_cluster else None, **engine_kwargs)
    except BaseException:
        client.close()
        raise
    return engine


def batch(
    cls,
    system: str,
    jobs: int,
    options: dict | None = None,
    resources: dict | None = None,
    **engine_kwargs,
):
    """Submit ``jobs`` worker jobs to a batch system through dask-jobqueue and run on
    them (see :func:`~hrl_tasks.scheduler.clusters.start_batch_cluster`); closing the
    engine ends the jobs. Workers join as their jobs start.

    Example::

        engine = Engine.batch("slurm", jobs=2, options={"cores": 4, "memory": "8GB"})
    """
    from hrl_tasks.scheduler.clusters import start_batch_cluster

    cluster = start_batch_cluster(system, jobs, options, resources)
    try:
        return cls.from_cluster(cluster, close_cluster=True, **engine_kwargs)
    except BaseException:
        cluster.close()
        raise


def from_gateway(
    cls,
    address: str | None = None,
    *,
    workers: int = 2,
    adapt: tuple[int, int] | None = None,
    options: dict | None = None,
    keep: bool = False,
    timeout: float = 300.0,
    scale_down_after_s: float = 10.0,
    **engine_kwargs,
):
    """Ask a Dask Gateway for a cluster and run on it; closing the engine shuts
    the cluster down unless ``keep``.

    Address and credentials come from Dask's configuration (``gateway.address``,
    ``gateway.auth``; ``DASK_GATEWAY__...``) unless ``address`` is given. A
    gateway's clusters use TLS; their workers declare ``CPU`` = their threads.

    Example::

        engine = Engine.from_gateway(workers=4, options={"worker_cores": 1})

    Args:
        address: the gateway's URL (``http://host:8000``).
        workers: how many workers to ask for; the first is waited for (up to
            ``timeout``), the others join as they start.
        adapt: ``(minimum, maximum)``: scale between them with the engine's own
            work (its queued and running tasks and its stateful workers, which
            Dask's own adaptive scaling does not see); a worker that works for
            an engine is never the one retired. ``workers`` is then the start.
        options: cluster options the gateway offers (``gateway.cluster_options()``);
            one it does not offer fails, naming those it does.
        keep: leave the cluster running after the engine closes (its name is
            ``engine.cluster.name``; ``Gateway().connect(name)`` reaches it).
        timeout: seconds to wait for the first worker.
        scale_down_after_s: with ``adapt``: how long the work must stay below
            the cluster's size before it shrinks (growing is at once).
        **engine_kwargs: as for :class:`Engine`.

    Raises:
        EngineError: dask-gateway missing, no address, refused credentials, an
            option not offered, or no worker started within ``timeout``.
    """
    from hrl_tasks.scheduler import downscaling
    from hrl_tasks.scheduler.adaptive import Bounds, ClusterUpkeep, wanted_workers
    from hrl_tasks.scheduler.dask_compat import close_gateway_once
    from hrl_tasks.scheduler.gateway import (
        close_cluster,
        cluster_options,
        new_cluster,
        open_gateway,
    )

    bounds = Bounds(*adapt) if adapt is not None else None
    start = wanted_workers(workers, 1, bounds) if bounds else workers
    gateway = open_gateway(address)
    try:
        cluster = new_cluster(gateway, cluster_options(gateway, options or {}), keep=keep)
    finally:
        close_gateway_once(gateway)
    try:
        engine = cls.from_cluster(cluster, close_cluster=True, **engine_kwargs)
    except BaseException:
        close_cluster(cluster)
        raise
    engine.own_cluster(cluster, functools.partial(close_cluster, cluster))  # its gateway once
    try:
        # Before any worker starts: each then declares its threads as it joins.
        engine.client.register_plugin(DeclareThreads(), name=DeclareThreads.name)
        if bounds is not None:
            downscaling.register(engine.client)
        cluster.scale(start)
        try:  # the others join as they start (a gateway may also cap the size)
            engine.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise EngineError(
                f"the gateway's cluster {cluster.name} started no worker within "
                f"{timeout:g} s; its server's log says why (a worker without this "
                "hrl_tasks cannot start: the gateway's workers need its environment)"
            ) from None
        check_versions(engine.client)
        engine.helpers.append(ClusterUpkeep(engine, cluster, bounds, start, scale_down_after_s))
    except BaseException:
        engine.close()
        raise
    return engine
