"""The engine's stream of messages to one worker (:class:`TaskChannel`), and the
functions it has sent (:class:`FunctionCache`). The engine opens one per worker it
sends to (:mod:`~hrl_tasks.scheduler.stream_route`); a host's relay opens one to
each host-mate (:mod:`~hrl_tasks.scheduler.relay`). The worker's end is
:mod:`~hrl_tasks.scheduler.task_service`.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import logging
from collections.abc import Callable

import cloudpickle

from hrl_tasks.scheduler import dask_compat, wire
from hrl_tasks.scheduler.wire import TASKS_HANDLER, picklable, write_batches

logger = logging.getLogger(__name__)
FUNCTIONS_KEPT = 1024
"""Functions a stream's two ends keep for tasks that name them again. A task's function
is known by the object (the same function again costs a lookup) or, for a new object
such as a lambda made per call, by its pickle's content (equal ones are sent once);
past this many, the least recently used is forgotten on both ends."""


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

    def relay(self, items: list) -> None:
        """Send a round of direct calls, ``(address, key, spec, call)`` each, to be
        relayed from this worker to its host-mates (`relay`)."""
        if self.closed:
            self.on_closed(self.address, tuple(key for _, key, _, _ in items))
            return
        self._send(("relay", items))

    def recall(self, key: str, obj_id: str) -> None:
        """Ask for the answer of a call of ``obj_id`` that came to the worker through a
        relay the engine lost (`task_service`: ``"recall"``)."""
        if self.closed:
            self.on_closed(self.address, (key,))
            return
        self._send(("recall", key, obj_id))

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
        if message[0] == "relay":  # the round goes on without the calls that do not
            good, bad = picklable(message[1])
            for (_, key, spec, call), error in bad:
                self._unpicklable(("call", key, spec, call), error)
            if good:
                self._send(("relay", good))
            return
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
