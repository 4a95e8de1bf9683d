"""Values that many direct calls need, sent once: ``engine.share(value)``.

The first direct call that carries a :class:`Shared` value takes the value
along (a :class:`SharedValue` marker) and its worker keeps it; calls to other
workers carry a :class:`SharedRef`, and those workers fetch the value from the
first one, worker to worker. Should that worker be gone, or not answer within
``PEER_ANSWER_S`` (frozen), the call is sent again with the value inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from distributed.protocol import to_serialize

from hrl_tasks.scheduler import dask_compat, wire

SHARED_HANDLER = "hrl_tasks_shared_value"
SHARED_WAIT_S = 30.0  # a peer asking for a shared value waits this long for it to arrive
PEER_CONNECT_S = 2.0  # to reach the worker holding a shared value; then the driver sends it
# For the holder's answer: a frozen holder (a stopped process, a machine swapping) still
# accepts connections and would hold the call until it runs again; the driver sends it.
PEER_ANSWER_S = 3.0


@dataclass(frozen=True)
class SharedValue:
    """A shared value in a direct call's arguments, sent with it; kept for the peers."""

    key: str
    value: Any


@dataclass(frozen=True)
class SharedRef:
    """A shared value in a direct call's arguments, to fetch from the worker ``holder``."""

    key: str
    holder: str


class InputLostError(Exception):
    """A direct call's shared input could not be fetched from the worker holding it."""


class Shared:
    """A value for many direct calls that leaves the driver once: ``engine.share(value)``.

    The first direct call that carries it takes the value along, and its worker
    keeps it (the newest few shared values per worker); the calls to other
    workers carry a reference, and those workers fetch the value from the first
    one, worker to worker. Should that worker be gone, a call takes the value
    along again. Passed to a task or an ordinary call, it is just its value.
    Example::

        weights = engine.share(policy.get_weights())
        refs = [w.call("set_weights", weights, direct=True) for w in rollout_workers]

    Attributes:
        value: the value.
        key: its name in the workers' stores.
        holder: the worker that received it first, once a call has carried it.
    """

    def __init__(self, value: Any):
        self.value = value
        self.key = f"shared-{uuid.uuid4().hex}"
        self.holder: str | None = None
        self._lock = threading.Lock()

    def marker(self, address: str, may_hold: bool = True) -> SharedValue | SharedRef:
        """What a call to ``address`` carries: the value, or where to fetch it. A worker
        that may not hold it for the others (one that stopped reporting: those asking
        it would wait) does not become its holder: with no holder yet it gets the
        value itself."""
        with self._lock:
            if self.holder is None:
                self.holder = address if may_hold else None
                return SharedValue(self.key, self.value)
        return SharedRef(self.key, self.holder)

    def __reduce__(self):
        raise TypeError(
            "a Shared value travels as an argument of engine calls, not inside other objects"
        )


def direct_arguments(obj: Any, address: str, may_hold: bool = True) -> tuple[Any, dict[str, Any]]:
    """``obj`` ready for a direct call to ``address``: each `Shared` as its marker
    (see `Shared.marker`).

    Returns:
        ``(converted, {key: value})``: the shared values, to send along instead
        should the worker holding them be gone.
    """
    values: dict[str, Any] = {}

    def walk(item):
        if isinstance(item, Shared):
            values[item.key] = item.value
            return item.marker(address, may_hold)
        if isinstance(item, (list, tuple)):
            return rebuilt(item, [walk(x) for x in item])
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(obj), values


def inline(obj: Any, values: dict[str, Any]) -> Any:
    """``obj`` with each `SharedRef` replaced by the value itself."""
    if isinstance(obj, SharedRef):
        return SharedValue(obj.key, values[obj.key])
    if isinstance(obj, (list, tuple)):
        return rebuilt(obj, [inline(x, values) for x in obj])
    if isinstance(obj, dict):
        return {k: inline(v, values) for k, v in obj.items()}
    return obj


def fetched_from(obj: Any, keys: set[str], address: str) -> Any:
    """``obj`` with each `SharedRef` among ``keys`` fetched from ``address`` instead (a
    host's relay, which gets the value itself: each host fetches it once)."""
    if isinstance(obj, SharedRef):
        return SharedRef(obj.key, address) if obj.key in keys else obj
    if isinstance(obj, (list, tuple)):
        return rebuilt(obj, [fetched_from(x, keys, address) for x in obj])
    if isinstance(obj, dict):
        return {k: fetched_from(v, keys, address) for k, v in obj.items()}
    return obj


# --- worker side (runs on the worker's event loop) ------------------------------------


async def resolve_shared(runtime, obj):
    """``obj`` with shared values in place of SharedValue / SharedRef markers.

    Raises:
        InputLostError: if a referenced value cannot be fetched from its holder.
    """
    if isinstance(obj, SharedValue):
        runtime.keep_shared(obj.key, obj.value)
        return obj.value
    if isinstance(obj, SharedRef):
        return await _fetch(runtime, obj)
    if isinstance(obj, (list, tuple)):
        return rebuilt(obj, [await resolve_shared(runtime, x) for x in obj])
    if isinstance(obj, dict):
        return {k: await resolve_shared(runtime, v) for k, v in obj.items()}
    return obj


async def ask_peer_for(pool, address: str, handler: str, key: str) -> Any:
    """The value a peer's ``handler`` answers for ``key``, asked on a connection from
    ``pool``; :class:`InputLostError` if the peer is gone, does not answer, or has no
    such value.

    A short connect time-out: Dask retries a refused connection for 30 s, and a dead
    peer would stall the caller that long. Bounded from outside too: a frozen peer
    accepts the connection, and Dask's handshake with it outlasted its own time-out.
    """
    try:
        comm = await asyncio.wait_for(
            pool.connect(address, timeout=PEER_CONNECT_S), PEER_CONNECT_S + 1.0
        )
    except (OSError, asyncio.TimeoutError):
        raise InputLostError(key) from None
    try:
        response = await asyncio.wait_for(
            dask_compat.ask_peer(comm, handler, key=key), PEER_ANSWER_S
        )
    except (OSError, asyncio.TimeoutError):
        comm.abort()
        raise InputLostError(key) from None
    pool.reuse(address, comm)
    if response["status"] != "OK":
        raise InputLostError(key)
    return wire.answered_value(response)


async def _fetch(runtime, ref: SharedRef) -> Any:
    if ref.key in runtime.shared:
        return runtime.shared[ref.key]
    # On InputLostError the driver sends the value itself.
    value = await ask_peer_for(runtime.worker.rpc, ref.holder, SHARED_HANDLER, ref.key)
    runtime.keep_shared(ref.key, value)
    return value


async def serve_shared(runtime, key: str) -> dict:
    """A peer's request for shared value ``key``: waits for it to arrive, unless it
    came and was let go (a holder keeps the newest few)."""
    if key not in runtime.shared and key not in runtime.shared_dropped:
        arrived = runtime.shared_arrived.setdefault(key, asyncio.Event())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(arrived.wait(), SHARED_WAIT_S)
    if key not in runtime.shared:
        runtime.shared_arrived.pop(key, None)
        return {"status": "missing"}
    return {"status": "OK", "value": to_serialize(runtime.shared[key])}


def rebuilt(container, items: list):
    """A list, tuple, set or named tuple like ``container`` holding ``items``."""
    if isinstance(container, tuple) and hasattr(container, "_fields"):  # a named tuple
        return type(container)(*items)
    return type(container)(items)
