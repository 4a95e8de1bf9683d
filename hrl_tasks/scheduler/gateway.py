"""Dask Gateway: a cluster asked of a gateway server for one run, and given back after.

A gateway (``dask-gateway-server``) creates clusters on request for
authenticated users, on Kubernetes, Hadoop/YARN, a batch system or local
processes. Its address and credentials come from Dask's configuration
(``gateway.address``, ``gateway.auth``, or their ``DASK_GATEWAY__...``
environment variables), as every ``dask_gateway.Gateway()`` reads them; a run
never takes a password on its command line.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import dask

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler.errors import EngineError


def open_gateway(address: str | None = None):
    """A ``dask_gateway.Gateway`` at ``address`` (None: ``gateway.address`` of Dask's
    configuration), with the authentication that configuration names.

    Raises:
        EngineError: if dask-gateway is not installed, or no address is known.
    """
    try:
        from dask_gateway import Gateway
    except ImportError:
        raise EngineError(
            "a Dask Gateway needs dask-gateway: pip install 'hrl_tasks[gateway]'"
        ) from None
    if not address and not dask.config.get("gateway.address", None):
        raise EngineError(
            "no gateway address: pass --gateway URL, or set gateway.address in Dask's "
            "configuration (DASK_GATEWAY__ADDRESS=http://host:8000)"
        )
    return Gateway(address or None)


def close_cluster(cluster) -> None:
    """Close a cluster; a ``GatewayCluster``'s own gateway client stays closed."""
    cluster.close()
    inner = getattr(cluster, "gateway", None)
    if inner is not None and hasattr(inner, "close"):
        dask_compat.gateway_closed(inner)


def refused(gateway, exc: BaseException) -> EngineError:
    """The one line that says why a gateway did not answer a request, and what would help."""
    status = getattr(exc, "status", None)
    where = gateway.address
    if status in (401, 403):
        auth = dask.config.get("gateway.auth.type", None) or "none set"
        return EngineError(
            f"the gateway at {where} refused the credentials (HTTP {status}; auth type: {auth}): "
            "set them in Dask's configuration, gateway.auth (e.g. DASK_GATEWAY__AUTH__TYPE=basic "
            "and DASK_GATEWAY__AUTH__KWARGS__PASSWORD)"
        )
    if status is not None:
        return EngineError(f"the gateway at {where} answered HTTP {status}: {exc}")
    return EngineError(f"no gateway answers at {where} ({type(exc).__name__}: {exc})")


def cluster_options(gateway, wanted: dict):
    """The gateway's cluster options with ``wanted`` set; the first request made, so
    it also checks the credentials.

    Raises:
        EngineError: for refused credentials, a gateway that does not answer, an option
            the gateway does not offer (naming those it does) or a value it refuses.
    """
    try:
        options = gateway.cluster_options()
    except Exception as exc:  # aiohttp's errors: a status, or no connection
        raise refused(gateway, exc) from None
    offered = sorted(options)
    unknown = sorted(set(wanted) - set(offered))
    if unknown:
        raise EngineError(
            f"the gateway at {gateway.address} offers no cluster option "
            f"{', '.join(unknown)}; it offers: {', '.join(offered) or 'none'}"
        )
    for key, value in wanted.items():
        try:
            options[key] = value
        except (TypeError, ValueError) as exc:
            raise EngineError(f"--gateway-opt {key}={value!r}: {exc}") from None
    return options


@contextlib.contextmanager
def interrupts_held():
    """Hold Ctrl-C (SIGINT) until the block ends; yields a list that then holds True if
    one came (the caller acts on it: a cluster being created is known by name before
    the interrupt stops the run, so it can be shut down). Only in the main thread
    (elsewhere signals do not arrive; the list stays empty)."""
    caught: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    before = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, before)


def new_cluster(gateway, options, keep: bool = False):
    """A new cluster of ``gateway`` with ``options``; shut down when closed unless
    ``keep``. An interrupt while it is created shuts it down, then goes on as
    ``KeyboardInterrupt``."""
    with interrupts_held() as interrupted:
        try:
            cluster = gateway.new_cluster(options, shutdown_on_close=not keep)
        except Exception as exc:
            raise refused(gateway, exc) from exc
    if interrupted:
        with contextlib.suppress(Exception):  # the interrupt goes on whatever the gateway says
            cluster.shutdown()
        raise KeyboardInterrupt
    return cluster


def keep_cluster_busy(client) -> None:
    """Give the scheduler one short task to see.

    A gateway shuts a cluster down after ``idle_timeout`` without tasks it can see
    (its scheduler's transitions); the engine's direct route and calls send it
    none. While the engine works, this runs now and then."""
    import uuid

    client.submit(int, 0, key=f"hrl-tasks-keepalive-{uuid.uuid4().hex}")
