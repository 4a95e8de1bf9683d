"""Plain tasks sent straight to a worker (the direct route): the engine's side.

One :class:`TaskChannel` per worker the engine sends tasks to: a stream to the
worker's ``hrl_tasks_tasks`` handler (:mod:`~hrl_tasks.scheduler.task_service`),
written in batches as messages come, and read until it closes. Everything here
runs on the engine's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from hrl_tasks.scheduler import dask_compat, wire
from hrl_tasks.scheduler.task_service import TASKS_HANDLER, write_batches

logger = logging.getLogger(__name__)
CONNECT_S = 5.0  # to open a worker's stream; a worker that does not answer is treated as lost


class TaskChannel:
    """The engine's stream of tasks to the worker at ``address``.

    ``on_answers(address, answers)`` is called with the answers of each message,
    ``(kind, key, status, value, elapsed)`` each (see `task_service`; status
    ``"unsent"``: a direct call whose arguments did not pickle, which never
    left); ``on_closed(address, keys)`` once, when the stream breaks, with the
    keys of the tasks and calls sent on it that had not ended.
    """

    def __init__(
        self,
        address: str,
        connection_args: dict,
        on_answers: Callable,
        on_closed: Callable,
    ):
        self.address = address
        self.connection_args = connection_args
        self.on_answers = on_answers
        self.on_closed = on_closed
        self.stream = None  # a `wire` stream, once open
        self.functions: dict[int, tuple[int, object]] = {}  # id(fn) -> (fn id, fn)
        self.outbox: list = []
        self.wake = asyncio.Event()
        self.in_flight: set[str] = set()
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
                    self.address, TASKS_HANDLER, self.connection_args, CONNECT_S
                ), CONNECT_S + 1,
            )  # fmt: skip
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
        known = self.functions.get(id(fn))
        if known is None or known[1] is not fn:
            known = (next(self.fn_ids), fn)
            self.functions[id(fn)] = known
            self._send(("fn", known[0], fn))
        self.in_flight.add(key)
        self._send(("run", key, spec, known[0], args, kwargs))

    def call(self, key: str, spec: dict, call: tuple) -> None:
        """Send one direct call to a stateful object living on the worker."""
        if self.closed:
            self.on_closed(self.address, (key,))
            return
        self.in_flight.add(key)
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
        if key in self.in_flight:
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
            self.functions = {k: v for k, v in self.functions.items() if v[0] != message[1]}
            self.broken[message[1]] = exc
            return
        if message[0] == "value":  # a put Dask could send: its tasks find it missing
            self.puts.pop(message[1], None)
            return
        key = message[1]
        error = exc if message[0] == "call" else self.broken.get(message[3], exc)
        self.in_flight.discard(key)
        what = "call's arguments" if message[0] == "call" else "task's function or arguments"
        status = "unsent" if message[0] == "call" else "error"
        self.on_answers(self.address, [("done", key, status, TypeError(
            f"the {what} cannot be sent to the worker: {error!r}"
        ), None)])  # fmt: skip

    async def _read(self) -> None:
        try:
            while not self.closed:
                answers = await self.stream.receive()
                for kind, key, *_ in answers:
                    if kind == "done":
                        self.in_flight.discard(key)
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
        lost, self.in_flight = tuple(self.in_flight), set()
        self.on_closed(self.address, lost)

    def close(self) -> None:
        """Close the stream; the tasks in flight are reported as on a broken stream."""
        self._close()
