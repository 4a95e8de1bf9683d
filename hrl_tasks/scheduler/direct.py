"""Direct calls: stateful-worker calls sent straight to the worker, not through the scheduler.

An ordinary call of a stateful worker is a Dask task pinned to the object's
worker: the client sends it to the scheduler, the scheduler to the worker, the
worker reports back to the scheduler, the scheduler tells the client, and the
client fetches the result from the worker. On the embedded cluster, whose
scheduler shares the driver's process and GIL with the learner, that cost
about 6 ms of the driver's CPU and 3.5 ms of the worker's per call here. A
direct call is one message to the worker and its answer, as Dask's actors do
(under 1 ms of each), and keeps what stateful calls promise: the order among
the object's calls, recovery when its worker dies, backups on idle peers of a
group, statistics and fault injection. ``handle.call(..., direct=True)``.

What it gives up: the result lives in the driver, not in the cluster, so it
cannot be another task's dependency (pass ``ref.result()``); arguments are
values, not TaskRefs; and the call does not appear in the dashboard's task
stream. A value that many direct calls need, such as new weights for every
rollout worker, goes in a :class:`Shared` (``engine.share(value)``): it leaves
the driver with the first call, and the other workers fetch it from that one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import uuid
from typing import TYPE_CHECKING, Any

from distributed.protocol import to_serialize

from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.worker_side import DIRECT_HANDLER, SharedRef, SharedValue

if TYPE_CHECKING:
    from hrl_tasks.scheduler.engine import Engine
    from hrl_tasks.scheduler.taskref import TaskRef


class DirectFuture:
    """One attempt of a direct call, with the parts of a Dask future the engine uses.

    Attributes:
        key: a fresh key, as for every attempt (statistics and speculation use it).
        address: the worker the call was sent to.
    """

    def __init__(self, key: str, address: str):
        self.key = key
        self.address = address
        self._outcome: cf.Future = cf.Future()
        self._state = self  # the engine's supervision awaits ``future._state.wait()``

    @property
    def status(self) -> str:
        """``pending``, ``finished``, ``error`` or ``cancelled``, as for a Dask future."""
        if not self._outcome.done():
            return "pending"
        if self._outcome.cancelled():
            return "cancelled"
        return "error" if self._outcome.exception() is not None else "finished"

    async def wait(self) -> None:
        """Until the call has an outcome (on the client's event loop)."""
        mirror = asyncio.wrap_future(self._outcome)
        await asyncio.wait([mirror])
        if not mirror.cancelled():
            mirror.exception()  # seen here; the engine reads it from this future

    def done(self) -> bool:
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> Any:
        return self._outcome.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._outcome.exception(timeout)

    def cancel(self) -> None:
        """Drop the outcome; the worker still runs the call (it cannot be told)."""
        self._outcome.cancel()

    def _settle(self, value: Any = None, error: BaseException | None = None) -> None:
        try:
            if error is None:
                self._outcome.set_result(value)
            else:
                self._outcome.set_exception(error)
        except cf.InvalidStateError:
            pass  # cancelled meanwhile, perhaps from another thread

    def __repr__(self) -> str:
        return f"<DirectFuture {self.key} {self.status} on {self.address}>"


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

    def marker(self, address: str) -> SharedValue | SharedRef:
        """What a call to ``address`` carries: the value, or where to fetch it."""
        with self._lock:
            if self.holder is None:
                self.holder = address
                return SharedValue(self.key, self.value)
        return SharedRef(self.key, self.holder)

    def __reduce__(self):
        raise TypeError(
            "a Shared value travels as an argument of engine calls, not inside other objects"
        )


def direct_arguments(obj: Any, address: str) -> tuple[Any, dict[str, Any]]:
    """``obj`` ready for a direct call to ``address``: each `Shared` as its marker.

    Returns:
        ``(converted, {key: value})``: the shared values, to send along instead
        should the worker holding them be gone.
    """
    values: dict[str, Any] = {}

    def walk(item):
        if isinstance(item, Shared):
            values[item.key] = item.value
            return item.marker(address)
        if isinstance(item, (list, tuple)):
            return type(item)(walk(x) for x in item)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(obj), values


def inline(obj: Any, values: dict[str, Any]) -> Any:
    """``obj`` with each `SharedRef` replaced by the value itself."""
    if isinstance(obj, SharedRef):
        return SharedValue(obj.key, values[obj.key])
    if isinstance(obj, (list, tuple)):
        return type(obj)(inline(x, values) for x in obj)
    if isinstance(obj, dict):
        return {k: inline(v, values) for k, v in obj.items()}
    return obj


def send(engine: Engine, address: str, creation: TaskRef, spec: dict, call: tuple, values: dict):
    """Send one direct call to ``address`` once ``creation`` (the object's) has finished.

    Returns:
        Its `DirectFuture`, settled on the client's event loop.
    """
    future = DirectFuture(spec["key"], address)
    engine.client.loop.add_callback(_send, engine, future, creation, spec, call, values)
    return future


async def _send(engine, future, creation, spec, call, values) -> None:
    address = future.address
    try:
        await _created(creation, spec["name"], address)
        rpc = engine.client.rpc(address)
        handler = getattr(rpc, DIRECT_HANDLER)
        response = await handler(spec=spec, call=to_serialize(call))
        if response["status"] == "input-lost":  # its holder is gone: send the values
            response = await handler(spec=spec, call=to_serialize(inline(call, values)))
    except OSError as exc:
        lost = WorkerLostError(
            f"{spec['name']}: lost the connection to worker {address} during a direct call "
            f"({exc!r})",
            address=address,
        )
        future._settle(error=lost)
        return
    except Exception as exc:  # the object did not start, or the message could not be made
        future._settle(error=exc)
        return
    if response["status"] == "OK":
        future._settle(response["result"])
    else:
        future._settle(error=response["exception"])


async def _created(creation: TaskRef, name: str, address: str) -> None:
    """Wait for the object's creation; raise as a pinned call would if it failed."""
    try:
        await asyncio.wrap_future(creation._outcome)
    except WorkerLostError:
        raise
    except Exception as exc:
        raise ObjectStartError(f"{name}: the stateful worker on {address} failed to start") from exc
