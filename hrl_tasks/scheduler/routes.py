"""How an attempt reaches a worker: the one interface every route has, and what
the routes share.

Three routes carry the state machine's :class:`~hrl_tasks.scheduler.events.Launch`
instructions, one module each:

- :mod:`~hrl_tasks.scheduler.dask_route`: a Dask task through Dask's scheduler
  (plain tasks with ``route="dask"``, stateful objects' creations, their
  scheduled calls, snapshots and kills);
- :mod:`~hrl_tasks.scheduler.stream_route`: a plain task on the engine's own
  stream to the worker it placed it on (``route="direct"``, the default); the
  stream carries direct calls too;
- :mod:`~hrl_tasks.scheduler.call_route`: a direct call to a stateful object
  (``handle.call(..., direct=True)``), on that stream.

Each is a :class:`Route`: it launches, cancels, and fetches what holds its
attempts' results. A route reaches the rest of the engine only through a
:class:`Carrier` (the backend that runs the state machine on the event loop) and
the :class:`~hrl_tasks.scheduler.records.BackendRecords`; the backend decides
which route takes a launch (:func:`route_of`) and imports the routes, which
import neither it nor each other.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from dask.typing import no_default

from hrl_tasks.scheduler import dask_compat, settings
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import EngineError
from hrl_tasks.scheduler.shared import Shared, rebuilt
from hrl_tasks.scheduler.task_service import KeptInput
from hrl_tasks.scheduler.taskref import Kept, Local, TaskRef

if TYPE_CHECKING:
    from distributed import Client

    from hrl_tasks.scheduler.errors import SchedulerLostError
    from hrl_tasks.scheduler.records import BackendRecords
    from hrl_tasks.scheduler.state import EngineState

CONNECTED = ("running", "newly-created")  # Client.status values with a scheduler


class Carrier(Protocol):
    """What a route uses of the backend that runs it (all on the event loop)."""

    client: Client
    state: EngineState  # read: its timings, the workers it knows, the silent ones
    topic: str  # where the workers report this engine's tasks
    closed: bool
    put_values: dict  # put task id -> its value, while its ref is held
    put_futures: dict  # put task id -> the Dask future holding it now

    def feed(self, *events) -> None:
        """Advance the state machine with ``events`` now."""

    def start(self, coroutine_fn, *args) -> None:
        """Run ``coroutine_fn(*args)`` as a task on the event loop."""

    def on_loop(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the event loop (from any thread)."""

    def later(self, *events) -> None:
        """Hand ``events`` to the state machine after what is being carried out now."""

    def lost_scheduler(self) -> SchedulerLostError:
        """The error for a client that lost its scheduler."""

    async def silent_workers(self) -> set:
        """The workers that stopped reporting, as their heartbeats say now."""


class Route(Protocol):
    """One way attempts reach the workers."""

    name: str  # the route in the table of attempts in flight (``InFlight.route``)

    def launch(self, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
        """Send ``launches``, tracked in the records; those that cannot be sent (their
        arguments do not serialize, an input is gone) come back as failed attempts."""

    def cancel(self, keys: tuple[str, ...]) -> None:
        """Stop what runs of the attempts ``keys`` (the state forgets them next)."""

    async def fetch(self, held: list, refs: list[TaskRef]) -> list:
        """The values ``held`` (what holds the results of ``refs``, in order)."""


def default_route(route: str | None) -> str:
    """How plain tasks reach the workers: ``route``, or if None the ``hrl-tasks.route``
    setting (`settings`: ``HRL_TASKS_ROUTE``, then ``dask.config``); where that is null
    too, ``"direct"`` (``"dask"`` on a distributed without the private part the task
    stream needs, see `dask_compat.PARTS`). A clear error for anything else."""
    chosen = settings.value("route", no_default if route is None else route)
    if chosen is None:
        # The task stream's threads are the worker's only through a private name.
        return "direct" if dask_compat.engine_threads_know_their_worker() else "dask"
    return chosen


def route_of(launch: ev.Launch) -> str:
    """The route that carries ``launch``: ``"call"``, ``"stream"`` or ``"dask"``."""
    if launch.direct_call:
        return "call"
    return "stream" if launch.route == "direct" else "dask"


def send_each(send, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
    """``send(launch)`` for each of ``launches``; one that raises (its arguments do
    not serialize, its input is gone) is a failed attempt, returned as an event."""
    failed = []
    for launch in launches:
        try:
            send(launch)
        except Exception as exc:
            failed.append(ev.AttemptDone(launch.key, "error", exc))
    return failed


def spec(key, name, attempt, resources, topic, internal) -> dict:
    """What a worker is told of an attempt beside its function and arguments."""
    return {
        "key": key,
        "name": name,
        "attempt": attempt,
        "resources": resources or {},
        "topic": topic,
        "internal": internal,
    }


def method_of(launch: ev.Launch, records: BackendRecords) -> tuple:
    """``(method, args, kwargs, record)`` of a call or snapshot of a stateful object:
    ``record``, the call's `TaskRecord` (None for a snapshot)."""
    if launch.kind == "snapshot":
        return "get_state", (), {}, None
    record = records.task_of(launch.args_of or launch.task_id)
    if record is None or record.payload is None:
        raise KeyError(f"the arguments of {launch.name} are gone")
    method, args, kwargs, _ = record.payload
    return method, args, kwargs, record


def resolve_inputs(obj, inputs: dict, result_of, sent: dict | None = None):
    """``obj`` with each TaskRef replaced by what ``sent`` gives for its task id, or
    by the Dask future of the key in ``inputs`` (a dependency), by its value if it
    is here, or by a :class:`KeptInput` if a worker keeps it; and each `Shared` by
    its value."""

    def walk(item):
        if isinstance(item, Shared):
            return item.value
        if isinstance(item, TaskRef):
            if sent and item.task_id in sent:
                return sent[item.task_id]
            found = result_of(inputs.get(item.task_id))
            if found is None and item.outcome.done() and item.outcome.exception() is None:
                found = item.outcome.result()
            if found is None:
                found = item.future
            if found is None:
                raise EngineError(f"the result of input {item.name!r} is not available")
            if isinstance(found, Kept):
                return KeptInput(found.key, found.address)
            return found.value if isinstance(found, Local) else found
        if isinstance(item, (list, tuple, set, frozenset)):
            return rebuilt(item, [walk(x) for x in item])
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(obj)


async def ask_worker(client: Client, address: str, connect_s: float, answer, handler, **msg):
    """What ``address``'s ``handler`` answers to ``msg``, awaited by ``answer(ask)``
    (None: given up). The connect is bounded too: Dask retries a refused one (a dead
    worker) for 30 s. The connection is reused after an answer, dropped otherwise."""
    pool = client.rpc
    comm = await asyncio.wait_for(pool.connect(address, timeout=connect_s), connect_s + 1.0)
    try:
        response = await answer(dask_compat.ask_peer(comm, handler, **msg))
    except BaseException:
        comm.abort()
        raise
    if response is None:
        comm.abort()
    else:
        pool.reuse(address, comm)
    return response
