"""The task stream: plain tasks sent straight to the worker the engine placed
them on (``route="direct"``, the default), on one stream per worker.

One :class:`TaskChannel` per worker the engine sends to: a stream to the
worker's ``hrl_tasks_tasks`` handler (:mod:`~hrl_tasks.scheduler.task_service`),
written in batches as messages come, and read until it closes. The stream
carries other routes' messages too (a direct call to a stateful object goes on
its worker's stream: :mod:`~hrl_tasks.scheduler.call_route`); their answers go to
the route that sent them (:meth:`StreamRoute.carry`). A result of
``KEEP_FROM_BYTES`` or more stays on its worker (:class:`~hrl_tasks.scheduler.taskref.Kept`)
until its last ref goes, and is fetched from there (:meth:`StreamRoute.fetch`).
Everything here runs on the engine's event loop.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import cloudpickle

from hrl_tasks.scheduler import dask_compat, wire
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import ResultsLost, WorkerLostError
from hrl_tasks.scheduler.routes import ask_worker, resolve_inputs, send_each, spec
from hrl_tasks.scheduler.task_service import (
    RESULT_HANDLER,
    TASKS_HANDLER,
    KeptInput,
    write_batches,
)
from hrl_tasks.scheduler.taskref import Kept, Local

if TYPE_CHECKING:
    from hrl_tasks.scheduler.records import BackendRecords
    from hrl_tasks.scheduler.routes import Carrier

logger = logging.getLogger(__name__)
FUNCTIONS_KEPT = 1024
"""Functions a stream's two ends keep for tasks that name them again. A task's function
is known by the object (the same function again costs a lookup) or, for a new object
such as a lambda made per call, by its pickle's content (equal ones are sent once);
past this many, the least recently used is forgotten on both ends."""


class StreamRoute:
    """Plain tasks on the engine's streams, and the streams themselves (see the module)."""

    name = "stream"

    def __init__(self, carrier: Carrier, records: BackendRecords):
        self.carrier = carrier
        self.records = records
        self.channels: dict[str, TaskChannel] = {}  # by worker address, opened on first use
        # route name -> (its answer's events, what to do with its keys on a broken stream)
        self.carried: dict[str, tuple[Callable, Callable]] = {}

    def carry(self, route: str, answer: Callable, cut: Callable) -> None:
        """The stream carries ``route``'s messages too: ``answer(address, key, status,
        value, elapsed)`` gives the events of one of its answers, ``cut(address, keys)``
        is told of its keys in flight on a stream that broke."""
        self.carried[route] = (answer, cut)

    def channel(self, address: str) -> TaskChannel:
        """The stream to ``address``, opened on first use (and again after it broke)."""
        channel = self.channels.get(address)
        if channel is None or channel.closed:
            channel = self.channels[address] = TaskChannel(
                address,
                self.carrier.client.connection_args,
                self.carrier.state.timings.stream_connect_s,
                self._answers,
                self._closed,
            )
        return channel

    # --- the route ----------------------------------------------------------------

    def launch(self, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
        return send_each(self._send, launches)

    def _send(self, launch: ev.Launch) -> None:
        records, puts = self.records, self.carrier.put_values
        fn, args, kwargs, topic = records.tasks[launch.task_id].payload
        address = launch.workers[0]
        channel = self.channel(address)
        sent = {}  # a put's value goes on the stream once; the task names it
        for task_id, key in launch.inputs.items():
            if task_id in puts:
                channel.put(key, task_id, puts[task_id])
                sent[task_id] = KeptInput(key, address)
        args, kwargs = resolve_inputs((args, kwargs), launch.inputs, records.result_of, sent)
        told = spec(launch.key, launch.name, launch.attempt, launch.request, topic, launch.internal)
        told["watched"] = launch.watched
        records.track(launch.key, self.name, address, sent=launch.name)
        channel.run(launch.key, told, fn, args, kwargs)

    def cancel(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            sent = self.records.answered(key, self.name)  # its answer, if any, is not awaited
            if sent is not None and sent[0] in self.channels:
                self.channels[sent[0]].cancel(key)

    async def fetch(self, held: list, refs: list) -> list:
        """The values of results kept on workers (``held``: :class:`Kept` each);
        :class:`ResultsLost` for those gone, all lost the same way together."""
        found = await asyncio.gather(*[self._fetch_one(item) for item in held])
        lost = [f for f in found if isinstance(f, ResultsLost)]
        if lost:  # one run again for them all
            first = lost[0]
            alike = [x for x in lost if (x.address, x.silent) == (first.address, first.silent)]
            keys = tuple(key for x in alike for key in x.keys)
            raise ResultsLost(
                str(first) + (f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""),
                keys,
                address=first.address,
                silent=first.silent,
            )
        return found

    async def _fetch_one(self, item: Kept):
        carrier = self.carrier
        if item.address in carrier.state.silent:  # known frozen: not waited for
            return ResultsLost(
                f"the result of {item.key} is held by {item.address}, which stopped reporting",
                (item.key,),
                address=item.address,
                silent=True,
            )
        try:  # None: the holder stopped reporting
            response = await ask_worker(
                carrier.client,
                item.address,
                carrier.state.timings.fetch_connect_s,
                lambda ask: self._answer_unless_silent(ask, item.address),
                RESULT_HANDLER,
                key=item.key,
            )
        except asyncio.TimeoutError:  # it took the connection and said nothing
            response = None
        except OSError:
            response = {"status": "missing"}
        if response is not None and response["status"] == "OK":
            return wire.answered_value(response)
        # A frozen holder (it took the connection and said nothing, or stopped
        # reporting) or one gone: the task runs again, away from a frozen one.
        silent = response is None or item.address in await carrier.silent_workers()
        return ResultsLost(
            f"the result of {item.key} was lost with its worker {item.address}"
            + (", which stopped reporting" if silent else ""),
            (item.key,),
            address=item.address,
            silent=silent,
        )

    async def _answer_unless_silent(self, ask, address: str):
        """``ask``'s answer, or None once ``address`` stopped reporting (a stopped process
        accepts the connection and never answers; a large value may take long)."""
        answer = asyncio.ensure_future(ask)
        while True:
            wait_s = self.carrier.state.timings.holder_silent_s
            done, _ = await asyncio.wait([answer], timeout=wait_s)
            if done:
                return answer.result()
            if address in await self.carrier.silent_workers():
                answer.cancel()
                return None

    # --- what the streams carry ------------------------------------------------------

    def kept(self, address: str, key: str, size) -> Kept:
        """A result kept on ``address`` under ``key``, let go there with its last ref."""
        value = Kept(address, key, size)
        weakref.finalize(value, self._release_kept, address, key)
        return value

    def forget_put(self, task_id: str) -> None:
        """The put ``task_id`` was let go: so is its value on every stream's worker."""
        for channel in self.channels.values():
            channel.forget_put(task_id)

    def _answers(self, address: str, answers: list) -> None:
        """A worker's answers on a stream, handled together (on the event loop)."""
        events = []
        for answer in answers:
            events += self._answer_events(address, *answer)
        if events:
            self.carrier.feed(*events)

    def _answer_events(self, address: str, kind: str, key: str, status, value, elapsed) -> list:
        records = self.records
        if kind == "done":
            for route, (answer, _) in self.carried.items():
                if records.awaits(key, route):
                    return answer(address, key, status, value, elapsed)
        else:
            if not records.awaits(key, self.name):
                return []
            if kind == "started":
                return [ev.Started(key, address)]
            return [ev.AttemptWaits(key, kind == "waiting")]
        sent = records.answered(key, self.name)
        if sent is None:  # dropped meanwhile (cancelled, or its worker counted as lost)
            if status == "kept" and address in self.channels:
                self.channels[address].release(key)
            return []
        timed = [] if elapsed is None else [ev.Ended(key, sent[1], address, elapsed, 0.0)]
        if status in ("OK", "kept"):
            held = self.kept(address, key, value) if status == "kept" else Local(value)
            records.finished(key, held)
            return [*timed, ev.AttemptDone(key, "finished")]
        if status == "cancelled":
            return [ev.AttemptDone(key, "cancelled")]
        if status == "input-lost":
            lost = WorkerLostError(f"{sent[1]}: its input {value} was lost with its worker")
            return [ev.AttemptDone(key, "error", lost, worker_lost=True)]
        return [*timed, ev.AttemptDone(key, "error", value)]

    def _closed(self, address: str, keys: tuple | None) -> None:
        """A stream broke: its worker died or cannot be reached. ``keys``: those sent
        after it broke, or None for every attempt awaited on it."""
        channel = self.channels.get(address)
        if channel is not None and channel.closed:
            del self.channels[address]  # a new one is opened if tasks go there again
        if keys is None:
            keys = self.records.awaited_at(address)
        for route, (_, cut) in self.carried.items():
            theirs = [key for key in keys if self.records.awaits(key, route)]
            if theirs:
                cut(address, theirs)
        lost = [key for key in keys if self.records.answered(key, self.name) is not None]
        error = WorkerLostError(f"lost the task stream to worker {address}", address=address)
        events = [ev.AttemptDone(key, "error", error, worker_lost=True) for key in lost]
        # Not inside the handling that sent them; the worker first, so that what runs
        # again is not sent there.
        self.carrier.later(ev.StreamLost(address), *events)

    def _release_kept(self, address: str, key: str) -> None:
        """A kept result's last reference went: the worker may let it go (any thread)."""
        if not self.carrier.closed:
            self.carrier.on_loop(self._tell_release, address, key)

    def _tell_release(self, address: str, key: str) -> None:
        channel = self.channels.get(address)
        if channel is not None and not channel.closed:
            channel.release(key)

    def close(self) -> None:
        """Close every stream (on the event loop)."""
        channels, self.channels = list(self.channels.values()), {}
        for channel in channels:
            self.carrier.on_loop(channel.close)


class TaskChannel:
    """The engine's stream of tasks to the worker at ``address``.

    ``on_answers(address, answers)`` is called with the answers of each message,
    ``(kind, key, status, value, elapsed)`` each (see `task_service`; status
    ``"unsent"``: a direct call whose arguments did not pickle, which never
    left); ``on_closed(address, None)`` once, when the stream breaks (what was
    in flight on it is the records' to know: ``BackendRecords.awaited_at``), and
    ``on_closed(address, (key,))`` for one sent after that.
    """

    def __init__(
        self,
        address: str,
        connection_args: dict,
        connect_s: float,
        on_answers: Callable,
        on_closed: Callable,
    ):
        self.address = address
        self.connection_args = connection_args
        self.connect_s = connect_s  # to open the stream; a worker that does not answer is lost
        self.on_answers = on_answers
        self.on_closed = on_closed
        self.stream = None  # a `wire` stream, once open
        self.functions = FunctionCache(FUNCTIONS_KEPT)
        self.outbox: list = []
        self.wake = asyncio.Event()
        self.puts: dict[str, str] = {}  # key -> put task id: values sent on this stream
        self.broken: dict[int, Exception] = {}  # fn id -> why it did not pickle
        self.fn_ids = itertools.count()
        self.closed = False
        self.writer: asyncio.Future | None = None  # ends with the stream (as the worker's)
        self.opened = asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        try:
            comm, plain = await asyncio.wait_for(
                dask_compat.open_stream(
                    self.address, TASKS_HANDLER, self.connection_args, self.connect_s
                ),
                self.connect_s + 1,
            )
            self.stream = await wire.opened(comm, plain)
        except (OSError, asyncio.TimeoutError) as exc:
            logger.info("hrl_tasks: no task stream to %s: %r", self.address, exc)
            self._close()
            return
        asyncio.ensure_future(self._read())
        if not self.closed:
            self.writer = asyncio.ensure_future(self._write())

    def run(self, key: str, spec: dict, fn, args: tuple, kwargs: dict) -> None:
        """Send one attempt."""
        if self.closed:
            self.on_closed(self.address, (key,))
            return
        fn_id = self.functions.of(fn)
        if fn_id is None:
            fn_id, forgotten = self.functions.add(fn, next(self.fn_ids))
            for old in forgotten:
                self._send(("forget-fn", old))
            if fn_id not in self.functions.sent:
                self.functions.sent.add(fn_id)
                self._send(("fn", fn_id, fn))
        self._send(("run", key, spec, fn_id, args, kwargs))

    def call(self, key: str, spec: dict, call: tuple) -> None:
        """Send one direct call to a stateful object living on the worker."""
        if self.closed:
            self.on_closed(self.address, (key,))
            return
        self._send(("call", key, spec, call))

    def put(self, key: str, task_id: str, value) -> None:
        """Send a put's value under ``key``, once: the worker keeps it for the tasks
        that name it until :meth:`forget_put` (or the stream's end)."""
        if key not in self.puts:
            self.puts[key] = task_id
            self._send(("value", key, value))

    def forget_put(self, task_id: str) -> None:
        """The put ``task_id`` was let go: so is its value on the worker."""
        for key in [k for k, t in self.puts.items() if t == task_id]:
            del self.puts[key]
            self._send(("release", key))

    def cancel(self, key: str) -> None:
        """Tell the worker to drop attempt ``key`` (sent on this stream, not answered)."""
        self._send(("cancel", key))

    def release(self, key: str) -> None:
        """Let the worker forget a result it keeps."""
        self._send(("release", key))

    def _send(self, message) -> None:
        if self.closed:
            return
        self.outbox.append(message)
        self.wake.set()

    async def _write(self) -> None:
        try:
            await write_batches(self.stream, self.outbox, self.wake, self._unpicklable)
        except OSError:
            self._close()

    def _unpicklable(self, message, exc: Exception) -> None:
        """A task whose function or arguments do not pickle fails with that, unsent."""
        if message[0] == "fn":  # the tasks that name it fail as they come
            self.functions.forget(message[1])
            self.broken[message[1]] = exc
            return
        if message[0] == "value":  # a put Dask could send: its tasks find it missing
            self.puts.pop(message[1], None)
            return
        key = message[1]
        error = exc if message[0] == "call" else self.broken.get(message[3], exc)
        what = "call's arguments" if message[0] == "call" else "task's function or arguments"
        status = "unsent" if message[0] == "call" else "error"
        self.on_answers(
            self.address,
            [
                (
                    "done",
                    key,
                    status,
                    TypeError(f"the {what} cannot be sent to the worker: {error!r}"),
                    None,
                )
            ],
        )

    async def _read(self) -> None:
        try:
            while not self.closed:
                answers = await self.stream.receive()
                self.on_answers(self.address, answers)
        except OSError:
            self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wake.set()
        if self.writer is not None:  # it waits for more to write otherwise, for ever
            self.writer.cancel()
        if self.stream is not None:
            self.stream.abort()
        self.on_closed(self.address, None)

    def close(self) -> None:
        """Close the stream; the tasks in flight are reported as on a broken stream."""
        self._close()


class FunctionCache:
    """The functions one stream has sent, bounded: the least recently used goes first.

    A function is known by the object (its ``id``; the object is kept, so that the id
    is not reused meanwhile) and by the digest of its pickle, so that a new but equal
    function (a lambda made per call) takes the id of the one sent before. ``sent``
    holds the ids the worker has. Pure: the channel sends what it says.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.by_object: collections.OrderedDict[int, tuple[int, bytes, object]] = (
            collections.OrderedDict()
        )  # id(fn) -> (fn id, digest, fn)
        self.by_content: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.objects_of: dict[int, set[int]] = {}  # fn id -> ids of the objects naming it
        self.sent: set[int] = set()

    def of(self, fn) -> int | None:
        """The id of ``fn`` if this very object was added (and is still kept)."""
        known = self.by_object.get(id(fn))
        if known is None or known[2] is not fn:
            return None
        self.by_object.move_to_end(id(fn))
        self.by_content.move_to_end(known[1])
        return known[0]

    def add(self, fn, new_id: int) -> tuple[int, list[int]]:
        """``fn``'s id (that of an equal function added before, else ``new_id``) and
        the ids forgotten to stay within the limit that the worker holds (it is to
        forget them too). A function that does not pickle gets ``new_id`` (sending it
        fails as it did)."""
        try:
            digest = hashlib.blake2b(cloudpickle.dumps(fn), digest_size=16).digest()
        except Exception:
            digest = b"unpicklable %d" % new_id
        fn_id = self.by_content.setdefault(digest, new_id)
        self.by_content.move_to_end(digest)
        stale = self.by_object.pop(id(fn), None)
        if stale is not None:  # an older object with the same id, gone since
            self.objects_of.get(stale[0], set()).discard(id(fn))
        self.by_object[id(fn)] = (fn_id, digest, fn)
        self.objects_of.setdefault(fn_id, set()).add(id(fn))
        forgotten = []
        while len(self.by_content) > self.limit:
            _, old = self.by_content.popitem(last=False)
            self._drop_objects(old)
            if old in self.sent:
                self.sent.discard(old)
                forgotten.append(old)
        while len(self.by_object) > self.limit:  # many objects of one content
            object_id, (old, _, _) = self.by_object.popitem(last=False)
            self.objects_of.get(old, set()).discard(object_id)
        return fn_id, forgotten

    def forget(self, fn_id: int) -> None:
        """``fn_id`` is gone (it did not pickle): nothing names it any more."""
        for digest in [d for d, i in self.by_content.items() if i == fn_id]:
            del self.by_content[digest]
        self._drop_objects(fn_id)
        self.sent.discard(fn_id)

    def _drop_objects(self, fn_id: int) -> None:
        for object_id in self.objects_of.pop(fn_id, ()):
            self.by_object.pop(object_id, None)

    def __len__(self) -> int:
        return len(self.by_content)
