"""Direct calls: a call of a stateful object sent as one message to its worker
(``handle.call(..., direct=True)``), on the engine's stream to that worker.

A direct call waits here for its object's creation and for the direct calls it
takes as inputs, then goes on the stream (:mod:`~hrl_tasks.scheduler.stream_route`),
which hands its answer back here. The object's worker runs the calls in their
order (:mod:`~hrl_tasks.scheduler.worker_objects`); one that will never run is
skipped there (:meth:`CallRoute.skip`), so that the calls after it do not wait.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING

from distributed import fire_and_forget

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import InputFailedError, ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.relay import relay_lost, relay_rounds
from hrl_tasks.scheduler.routes import CONNECTED, method_of, send_each, spec
from hrl_tasks.scheduler.runtime import run_task
from hrl_tasks.scheduler.shared import direct_arguments, fetched_from, inline, rebuilt
from hrl_tasks.scheduler.task_service import KeptInput
from hrl_tasks.scheduler.taskref import Kept, Local, TaskRef
from hrl_tasks.scheduler.worker_objects import skip_calls

if TYPE_CHECKING:
    from hrl_tasks.scheduler.records import BackendRecords
    from hrl_tasks.scheduler.routes import Carrier
    from hrl_tasks.scheduler.stream_route import StreamRoute


def finished_inputs(obj):
    """``obj`` with each TaskRef (of a finished direct call) replaced by what a direct
    call is sent for it: its value, if it came to this process, else a
    :class:`KeptInput` naming the worker that keeps it (which the callee's worker
    fetches from there)."""
    if isinstance(obj, TaskRef):
        found = obj.outcome.result()
        return KeptInput(found.key, found.address) if isinstance(found, Kept) else found.value
    if isinstance(obj, (list, tuple)):
        return rebuilt(obj, [finished_inputs(x) for x in obj])
    if isinstance(obj, dict):
        return {k: finished_inputs(v) for k, v in obj.items()}
    return obj


def _address_of(launch: ev.Launch) -> str:
    return launch.workers[0]


class CallRoute:
    """Direct calls to stateful objects (see the module)."""

    name = "call"

    def __init__(self, carrier: Carrier, records: BackendRecords, streams: StreamRoute):
        self.carrier = carrier
        self.records = records
        self.streams = streams
        self.relayed: collections.Counter = collections.Counter()  # rounds and calls relayed
        streams.carry(self.name, self._answer, self._cut)

    def launch(self, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
        """Send each call to its worker, or a host's round of them through its relay."""
        if len(launches) < 2:  # one call: no round to make of it
            return send_each(self._send, launches)
        singles, rounds = relay_rounds(launches, _address_of, self._relayable)
        failed = send_each(self._send, singles)
        for relay, members in rounds:
            failed += self._send_round(relay, members)
        return failed

    def _relayable(self, launch: ev.Launch) -> bool:
        """A call that asked for a relay (`WorkerHandle.call`), to a reporting worker."""
        if launch.kind != "call" or launch.workers[0] in self.carrier.state.silent:
            return False
        record = self.records.task_of(launch.args_of or launch.task_id)
        return record is not None and record.relay

    def cancel(self, keys: tuple[str, ...]) -> None:
        """Nothing: a stateful call is not taken back once sent (it may have run); its
        answer, if it comes, finds the attempt forgotten."""

    async def fetch(self, held: list, refs: list) -> list:
        """A call's result came here (``Local``) or stays on its worker as the stream's
        tasks' do: fetched from there."""
        return await self.streams.fetch(held, refs)

    def skip(self, obj_id: str, address: str, seqs: tuple) -> None:
        """Tell the object's worker that calls ``seqs`` will never run."""
        carrier = self.carrier
        told = spec(carrier.state.new_key("skip"), "skip", 0, {}, carrier.topic, True)
        future = carrier.client.submit(
            run_task,
            skip_calls,
            told,
            (obj_id, list(seqs)),
            {},
            key=told["key"],
            pure=False,
            workers=[address],
            allow_other_workers=False,
        )
        fire_and_forget(future)

    def _told(self, launch: ev.Launch, via: str) -> tuple[dict, str, tuple, tuple]:
        """What the worker is told of a call, its method, its arguments and the direct
        calls among them it waits for; the call is tracked as sent on the stream to
        ``via`` (its worker, or its host's relay)."""
        records = self.records
        topic = records.recipe_of(launch.obj_id)[3]
        method, margs, mkwargs, record = method_of(launch, records)
        told = spec(launch.key, launch.name, launch.attempt, {}, topic, launch.internal)
        told["keep"] = record is not None and record.keep
        # Not followed by speculation: the call's time comes with its reply, and no
        # start or end report travels through the scheduler. Such a call does not
        # count as busy on its worker: it runs in its object's threads, not Dask's.
        told["quiet"] = not launch.watched
        records.track(launch.key, self.name, via)
        return told, method, (margs, mkwargs), () if record is None else record.inputs

    def _send(self, launch: ev.Launch) -> None:
        address = launch.workers[0]
        told, method, arguments, inputs = self._told(launch, address)
        if inputs or not self._made(launch.obj_id):
            self.carrier.start(self._direct, launch, address, told, method, arguments, inputs)
        else:  # most calls: nothing to wait for, so it goes now
            sent = self._call(launch, told, method, arguments, inputs, address)
            self.streams.channel(address).call(launch.key, *sent)

    def _made(self, obj_id: str) -> bool:
        """Whether the object was built (or is not known here): nothing to wait for."""
        creation = self.records.creation_of(obj_id)
        return creation is None or (
            creation.done() and not creation.cancelled() and creation.exception() is None
        )

    async def _direct(self, launch: ev.Launch, address: str, told, method, arguments, inputs):
        """Send a direct call on the stream to its object's worker once the object
        exists and the direct calls it takes as inputs have finished."""
        ready = await self._ready(launch, told, method, arguments, inputs, address)
        if ready is not None:
            self.streams.channel(address).call(launch.key, *ready)

    async def _ready(self, launch, told, method, arguments, inputs, via: str, shared_at=None):
        """`_call`'s ``(told, call)``, once its object exists and its inputs finished;
        None if it failed meanwhile (fed as such)."""
        try:
            await self._created(launch, launch.workers[0])
            await self._inputs_done(launch, inputs)
        except WorkerLostError as exc:
            self.carrier.feed(ev.AttemptDone(launch.key, "error", exc, worker_lost=True))
            return None
        except Exception as exc:  # the object did not start, or an input failed
            self.carrier.feed(ev.AttemptDone(launch.key, "error", exc))
            return None
        return self._call(launch, told, method, arguments, inputs, via, shared_at)

    def _call(self, launch, told, method, arguments, inputs, via: str, shared_at=None):
        """``(told, call)`` as sent, its ``inputs`` finished, tracked as sent on the
        stream to ``via``. ``shared_at``: ``(relay, keys)``, the shared values to fetch
        from the relay."""
        address = launch.workers[0]
        if inputs:  # most calls take values only: nothing to replace
            arguments = finished_inputs(arguments)
        # A frozen worker takes what is sent and answers nothing: a shared value goes
        # to it whole, and the other workers fetch it from one that reports.
        (args, kwargs), values = direct_arguments(
            arguments, address, may_hold=address not in self.carrier.state.silent
        )
        if shared_at is not None:
            relay, keys = shared_at
            if address == relay:
                keys.update(values)
            else:
                args, kwargs = fetched_from((args, kwargs), keys, relay)
                told = {**told, "relayed": True}  # its answer is kept there, for a recall
        call = (launch.obj_id, launch.seq, method, args, kwargs)
        self.records.sent_on(launch.key, self.name, via, (launch, told, call, values))
        return told, call

    def _send_round(self, relay: str, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
        """A host's calls as one message to its relay (`relay`)."""
        prepared, failed = [], []
        for launch in launches:
            try:
                prepared.append((launch, *self._told(launch, relay)))
            except Exception as exc:
                failed.append(ev.AttemptDone(launch.key, "error", exc))
        if prepared:
            self.relayed.update(rounds=1, calls=len(prepared))
            self.carrier.start(self._round, relay, prepared)
        return failed

    async def _round(self, relay: str, prepared: list) -> None:
        """Send a round once each call is ready (the relay's own first: the shared
        values it carries or fetches, its host-mates fetch from it)."""
        items, shared_at = [], (relay, set())
        for launch, *call in prepared:  # (told, method, arguments, inputs)
            ready = await self._ready(launch, *call, relay, shared_at)
            if ready is not None:
                items.append((launch.workers[0], launch.key, *ready))
                # Kept open, idle: a recall goes on it, and so do the worker's calls when it
                # is not relayed (frozen, say: a stream opened to a frozen worker waits for
                # `Timings.stream_connect_s` and is taken for a lost one).
                self.streams.channel(launch.workers[0])
        if items:
            self.streams.channel(relay).relay(items)

    async def _created(self, launch: ev.Launch, address: str) -> None:
        """Wait for the object's creation; raise as a pinned call would if it failed."""
        creation = self.records.creation_of(launch.obj_id)
        if creation is None:
            return
        try:
            await asyncio.wrap_future(creation)
        except WorkerLostError:
            raise
        except Exception as exc:
            raise ObjectStartError(
                f"{launch.name}: the stateful worker on {address} failed to start"
            ) from exc

    async def _inputs_done(self, launch: ev.Launch, inputs: tuple) -> None:
        """Wait for the direct calls among its ``inputs`` that have not finished; if one
        failed, this call will never run: its turn on the worker is skipped and the
        input's error raised (`InputFailedError`)."""
        for ref in inputs:
            if not ref.outcome.done():
                await asyncio.wait([asyncio.wrap_future(ref.outcome)])
            error = ref.outcome.exception()
            if error is not None:
                self.skip(launch.obj_id, launch.workers[0], (launch.seq,))
                if isinstance(error, WorkerLostError):
                    raise WorkerLostError(
                        f"{launch.name}: its input {ref.name!r} was lost with its worker"
                    ) from error
                raise InputFailedError(f"{launch.name}: its input {ref.name!r} failed") from error

    def _answer(self, via: str, key: str, status, value, elapsed) -> list:
        """The events of a direct call's answer (on the stream to its worker, or to its
        host's relay); a call whose shared input was lost with its holder goes again,
        once, straight to its worker with the values themselves."""
        records = self.records
        _, (launch, told, call, values) = records.answered(key, self.name)
        address = launch.workers[0]
        if status == "lost":  # the relay's stream to its worker broke: as ours would
            records.sent_on(key, self.name, address, (launch, told, call, values))
            self._cut(address, [key])
            return []
        if status == "never-came":  # its relay was lost before it got there
            self.skip(launch.obj_id, address, (launch.seq,))
            return [ev.AttemptDone(key, "error", relay_lost(launch.name, address))]
        if status == "input-lost":
            if values:
                records.sent_on(key, self.name, address, (launch, told, call, {}))
                self.streams.channel(address).call(key, told, inline(call, values))
                return []
            lost = WorkerLostError(f"{launch.name}: its shared input {value} was lost")
            return [ev.AttemptDone(key, "error", lost)]
        if status == "unsent":  # it never left: the calls after it must not wait for it
            self.skip(call[0], address, (call[1],))
            return [ev.AttemptDone(key, "error", value)]
        timed = [] if elapsed is None else [ev.Ended(key, launch.name, address, elapsed, 0.0)]
        if status == "kept":  # it stays on the worker until its last TaskRef goes
            records.finished(key, self.streams.kept(address, key, value))
            return [*timed, ev.AttemptDone(key, "finished")]
        if status != "OK":
            return [*timed, ev.AttemptDone(key, "error", value)]
        records.finished(key, Local(value))
        return [*timed, ev.AttemptDone(key, "finished", value=value if launch.fetch else None)]

    def _cut(self, address: str, keys: list) -> None:
        if not self.carrier.closed:
            self.carrier.start(self._calls_cut, address, keys)

    async def _calls_cut(self, address: str, keys: list) -> None:
        """Direct calls whose stream broke. Lost with their worker if it left the
        cluster (its object is then made again); if it still runs after
        ``Timings.call_cut_check_s``, they fail with the broken connection and the object
        stays: a stateful call that may have run is not taken for one that did not."""
        carrier = self.carrier
        if carrier.client.status not in CONNECTED:  # the workers went with their scheduler
            carrier.feed(ev.SchedulerLost(str(carrier.lost_scheduler())))
            return
        keys = self._relay_cut(address, keys)
        if not keys:
            return
        gone = await self._worker_left(address, carrier.state.timings.call_cut_check_s)
        events = []
        for key in keys:
            sent = self.records.answered(key, self.name)
            if sent is None:
                continue
            name = sent[1][0].name
            if gone:
                lost = WorkerLostError(
                    f"{name}: lost the connection to worker {address} during a direct call",
                    address=address,
                )
                events.append(ev.AttemptDone(key, "error", lost, worker_lost=True))
            else:
                cut = ConnectionError(
                    f"{name}: the connection to worker {address} broke during a direct "
                    "call, and the worker still runs: the call may or may not have run"
                )
                events.append(ev.AttemptDone(key, "error", cut))
        if events:
            carrier.feed(*events)

    def relay_silent(self, relay: str) -> None:
        """``relay`` stopped reporting: the answers of its host-mates' calls would wait
        with it, so those calls go as lost (their objects stay)."""
        self._relay_cut(relay, self.records.awaited_at(relay))

    def _relay_cut(self, relay: str, keys: list) -> list:
        """The calls relayed through ``relay`` to its host-mates, whose answers would
        have come back through it: asked of their own workers now (`TaskChannel.recall`),
        which keep them. The keys of the relay's own calls are returned."""
        own = []
        for key in keys:
            sent = self.records.sent(key, self.name)
            if sent is None or sent[0].workers[0] == relay:
                own.append(key)
                continue
            launch, address = sent[0], sent[0].workers[0]
            self.records.sent_on(key, self.name, address, sent)  # awaited from it now
            self.streams.channel(address).recall(key, launch.obj_id)
        return own

    async def _worker_left(self, address: str, within_s: float) -> bool:
        """Whether the scheduler drops ``address`` from its workers within ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                if address not in await dask_compat.worker_heartbeats(self.carrier.client):
                    return True
            except (OSError, KeyError, TypeError):  # the scheduler is busy or gone
                pass
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
