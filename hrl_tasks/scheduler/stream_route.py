"""The task stream: plain tasks sent straight to the worker the engine placed
them on (``route="direct"``, the default), on one stream per worker.

One :class:`TaskChannel` per worker the engine sends to: a stream to the
worker's ``hrl_tasks_tasks`` handler (:mod:`~hrl_tasks.scheduler.task_service`),
written in batches as messages come, and read until it closes. The stream
carries other routes' messages too (a direct call to a stateful object goes on
its worker's stream: :mod:`~hrl_tasks.scheduler.call_route`); their answers go to
the route that sent them (:meth:`StreamRoute.carry`). A result of
``hrl-tasks.keep-from`` bytes or more stays on its worker (:class:`~hrl_tasks.scheduler.taskref.Kept`)
until its last ref goes, and is fetched from there (:meth:`StreamRoute.fetch`).
Everything here runs on the engine's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler import wire
from hrl_tasks.scheduler.errors import ResultsLost, WorkerLostError
from hrl_tasks.scheduler.routes import ask_worker, resolve_inputs, send_each, spec
from hrl_tasks.scheduler.task_channel import TaskChannel
from hrl_tasks.scheduler.task_service import RESULT_HANDLER, KeptInput
from hrl_tasks.scheduler.taskref import Kept, Local

if TYPE_CHECKING:
    from hrl_tasks.scheduler.records import BackendRecords
    from hrl_tasks.scheduler.routes import Carrier

logger = logging.getLogger(__name__)


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
