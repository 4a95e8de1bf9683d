"""The Dask backend: carries out the state machine's instructions on a ``distributed.Client``.

It does two things and nothing else: it turns Dask callbacks (an attempt
ended, a worker reported, a worker left) into events for
:class:`~hrl_tasks.scheduler.state.EngineState`, and the instructions that come
back into client calls. The state machine changes only on the client's event
loop, its one owner: user threads hand their requests over with
:meth:`DaskBackend.push`, after recording what the state machine cannot hold
(a task's function and arguments, its ref's outcome: see
:class:`~hrl_tasks.scheduler.records.BackendRecords`). Calls that block on the
scheduler (changing a worker's advertised resources, reading the workers) run
on one admin thread, and come back as events.

Attempts are Dask tasks with fresh keys run through
:func:`~hrl_tasks.scheduler.runtime.run_task`; a direct call is one message to
the object's worker (:mod:`~hrl_tasks.scheduler.worker_objects`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import logging
import threading
import time
import weakref

from distributed import Client, fire_and_forget
from distributed.scheduler import KilledWorker

from hrl_tasks.scheduler import dask_compat, wire
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import (
    EngineError,
    InputFailedError,
    ObjectStartError,
    ResultsLost,
    SchedulerLostError,
    WorkerLostError,
)
from hrl_tasks.scheduler.records import BackendRecords
from hrl_tasks.scheduler.runtime import (
    change_supply,
    run_task,
    schedule_unrunnable,
    workers_and_holdings,
)
from hrl_tasks.scheduler.serialization import Sealed
from hrl_tasks.scheduler.shared import (
    PEER_CONNECT_S,
    Shared,
    direct_arguments,
    inline,
    rebuilt,
)
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.story import dask_record
from hrl_tasks.scheduler.task_channel import TaskChannel
from hrl_tasks.scheduler.task_service import RESULT_HANDLER, STORY_HANDLER, KeptInput
from hrl_tasks.scheduler.taskref import Kept, Local, TaskRef, collect_refs
from hrl_tasks.scheduler.validate import InvalidState
from hrl_tasks.scheduler.worker_objects import (
    call_object,
    create_object,
    destroy_object,
    skip_calls,
)

logger = logging.getLogger(__name__)
# Dask gives submissions less than ``fifo_timeout`` apart one generation, and a worker
# runs the newest of equal priority first (depth-first, for graphs). The engine's
# tasks are a queue: with no window, what was submitted first runs first, and a
# stateful worker's calls arrive in their order instead of waiting for their turn.
FIFO = "0 ms"
SUPPLY_THREADS = 4  # supply changes to this many workers at once
CONNECTED = ("running", "newly-created")  # Client.status values with a scheduler


def resent_value(value):
    """The task that puts a value lost with its worker in the cluster again."""
    return value


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


class OrderedPerKey:
    """Runs jobs on a few threads, one at a time and in order per key: a job that
    waits (on a worker that does not answer) holds up the later jobs of its key only."""

    def __init__(self, threads: int, name: str):
        self.pool = cf.ThreadPoolExecutor(threads, thread_name_prefix=name)
        self.lock = threading.Lock()
        self.waiting: dict[str, collections.deque] = {}  # key -> jobs behind the running one

    def submit(self, key: str, fn, *args) -> None:
        with self.lock:
            queue = self.waiting.get(key)
            if queue is not None:
                queue.append((fn, args))
                return
            self.waiting[key] = collections.deque()
        self.pool.submit(self._run, key, fn, args)

    def _run(self, key: str, fn, args) -> None:
        while True:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a job's failure must not stop its key's queue
                logger.exception("%s failed", getattr(fn, "__name__", fn))
            with self.lock:
                queue = self.waiting[key]
                if not queue:
                    del self.waiting[key]
                    return
                fn, args = queue.popleft()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False)


class DaskBackend(BackendRecords):
    """Runs an :class:`EngineState` on a Dask client.

    Args:
        client: the client.
        state: the state machine.
        topic: where the workers report this engine's tasks.
    """

    def __init__(self, client: Client, state: EngineState, topic: str):
        super().__init__()
        self.client = client
        self.header_keys = dask_compat.pin_header_keys()  # messages leave no dead slots
        self.state = state
        self.topic = topic
        self.loop = client.loop
        self.lock = threading.Lock()  # held while the state changes; readers take it too
        self.closed = False
        self.held_back: dict[str, list] = {}  # obj id -> creations waiting for a supply change
        self.batched: set = set()  # keys of attempts being put into one batch
        self.lingering: list = []  # finished results' futures, released in batches
        self.letting_go = False
        # Supply changes call the worker: one that just died holds up its own changes
        # (Dask retries a connection for 30 s), not those of the others, nor the reads.
        self.admin = OrderedPerKey(SUPPLY_THREADS, f"{topic}-admin")
        self.reader = cf.ThreadPoolExecutor(1, thread_name_prefix=f"{topic}-reader")
        self.refreshing = False
        self.refresh_again = False
        self.loop_thread = client.sync(self._thread_id)
        self.lost: SchedulerLostError | None = None
        self.invalid: InvalidState | None = None  # what a validating state machine found
        self.put_values: dict = {}  # put task id -> its value, while its ref is held
        self.put_futures: dict = {}  # put task id -> the Dask future holding it now
        self.channels: dict[str, TaskChannel] = {}  # the direct route's streams, by worker
        self.start(self._watch_scheduler)

    @staticmethod
    async def _thread_id() -> int:
        return threading.get_ident()

    # --- events in --------------------------------------------------------------

    def push(self, *events) -> None:
        """Hand events to the state machine from any thread (it runs on the event loop).

        Each push is handled on its own. Handling the pushes of a burst together
        (one ``client.map`` for a loop of ``submit`` calls) made the submit loop
        1.17x faster, but Dask then sometimes queued the burst behind cancelled
        tasks that still ran, so it was not kept.
        """
        self.on_loop(self.feed, *events)

    def on_loop(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the event loop: now if this is its thread, else soon."""
        if threading.get_ident() == self.loop_thread:
            fn(*args)
        else:
            self.loop.add_callback(fn, *args)

    def start(self, coroutine_fn, *args) -> None:
        """Start ``coroutine_fn(*args)`` as a task on the event loop."""
        self.on_loop(lambda: asyncio.ensure_future(coroutine_fn(*args)))

    def push_and_wait(self, *events) -> None:
        """Hand events to the state machine and return once they are handled."""
        if threading.get_ident() == self.loop_thread:
            self.feed(*events)
            return

        async def handled():
            self.feed(*events)

        self.client.sync(handled)

    def feed(self, *events) -> None:
        """Advance the state and carry out its instructions (on the event loop)."""
        if self.closed:
            return
        events = self.with_released(events, ev.Released)
        if self.put_values and isinstance(events[-1], ev.Released):
            for task_id in events[-1].task_ids:
                if self.put_values.pop(task_id, None) is not None:
                    for channel in self.channels.values():
                        channel.forget_put(task_id)
                self.put_futures.pop(task_id, None)
        try:
            with self.lock:
                instructions = self.state.handle(*events, now=time.monotonic())
            self.execute(instructions)
        except InvalidState as exc:  # a bug in the engine: every wait raises it from now on
            self.invalid = self.invalid or exc
            logger.exception("hrl_tasks: invalid state after %s", events)
        except Exception:  # never stop the event loop; the log says what broke
            logger.exception("hrl_tasks: error while handling %s", events)

    def raise_if_invalid(self) -> None:
        """Raise the broken invariant a validating engine found, if it found one."""
        if self.invalid is not None:
            raise self.invalid

    def on_reports(self, event) -> None:
        """Start and end reports from the workers (a Dask topic handler)."""
        _, reports = event
        found = []
        for kind, key, name, worker, elapsed, age in reports:
            if kind == "start":
                found.append(ev.Started(key, worker, age))
            else:
                found.append(ev.Ended(key, name, worker, elapsed, age))
        self.feed(*found)

    def on_cluster_event(self, event) -> None:
        msg = event[1]
        if not isinstance(msg, dict):
            return
        if msg.get("action") == "remove-worker":
            self.feed(ev.WorkerRemoved(msg.get("worker", ""), bool(msg.get("expected"))))
        elif msg.get("action") == "add-worker":
            self.feed(ev.WorkerAdded(msg.get("worker", "")))
        elif msg.get("action") in ("silent", "reporting"):
            waiting = tuple(str(key) for key in msg.get("waiting") or ())
            self.feed(ev.WorkerSilent(msg.get("worker", ""), msg["action"] == "silent", waiting))

    async def _watch_scheduler(self) -> None:
        """Fail everything at once when the client loses its scheduler.

        Dask cancels all of a client's futures as soon as its connection to the
        scheduler breaks, before it tries to reconnect (``Client._reconnect``);
        what was running is gone even if it reconnects, so there is nothing to
        wait for."""
        while not self.closed:
            await asyncio.sleep(self.state.timings.scheduler_check_s)
            if self.closed or self.client.status in CONNECTED:
                continue
            self.feed(ev.SchedulerLost(str(self.lost_scheduler())))
            return

    def lost_scheduler(self) -> SchedulerLostError:
        """The error for a client that lost its scheduler (the same one each time)."""
        if self.lost is None:
            address = getattr(self.client.scheduler, "address", None) or "its address"
            self.lost = SchedulerLostError(
                f"lost the Dask scheduler at {address} (client {self.client.status}): its "
                "process died or the network failed, and Dask cancelled the work in the "
                "cluster; restart the scheduler and resume from the last checkpoint"
            )
        return self.lost

    # --- instructions out ---------------------------------------------------------

    def execute(self, instructions: list) -> None:
        launches = []
        for ins in instructions:
            if isinstance(ins, ev.Launch):
                launches.append(ins)
                continue
            if launches:
                self.launch(launches)
                launches = []
            self.carry_out(ins)
        if launches:
            self.launch(launches)

    def carry_out(self, ins) -> None:
        if isinstance(ins, ev.Resolve):
            found = self.result_of(ins.key)
            self.settle(ins.task_id, value=Local(None) if found is None else found)
            if found is not None and not isinstance(found, Local):
                self.linger(found)
        elif isinstance(ins, ev.Fail):
            self.settle(ins.task_id, error=ins.error)
        elif isinstance(ins, ev.Forget):
            for key in ins.keys:
                self.forget(key)
        elif isinstance(ins, ev.Cancel):
            for obj_id, waiting in self.held_back.items():  # not sent yet: never will be
                self.held_back[obj_id] = [w for w in waiting if w.key not in ins.keys]
            for key in ins.keys:
                sent = self.answered(key, "stream")  # its answer, if any, is not awaited
                if sent is not None and sent[0] in self.channels:
                    self.channels[sent[0]].cancel(key)
            found = [self.forget(key) for key in ins.keys]
            in_cluster = [f for f in found if f is not None and not isinstance(f, (Local, Kept))]
            if in_cluster:
                self.start(dask_compat.cancel, self.client, in_cluster)
        elif isinstance(ins, ev.Skip):
            self._skip_calls(ins.obj_id, ins.address, ins.seqs)
        elif isinstance(ins, ev.Supply):
            self.held_back.setdefault(ins.obj_id, [])
            self.admin.submit(ins.address, self._change_supply, ins)
        elif isinstance(ins, ev.Refresh):
            self.refresh()
        elif isinstance(ins, ev.DropObject):
            self.drop_object(ins.obj_id)
        elif isinstance(ins, ev.Resend):
            value = self.put_values.get(ins.task_id)
            if ins.task_id in self.put_values:
                future = self.client.submit(resent_value, value, key=ins.key, pure=False)
                self.put_futures[ins.task_id] = future
                self.track(ins.key, "dask", value=future)
        elif isinstance(ins, ev.Later):
            self.on_loop(self.loop.call_later, ins.delay, self.feed, ins.event)

    def linger(self, future) -> None:
        """Hold a result's future a little after its ref is dropped.

        A dropped future makes the client tell the scheduler at once, and the
        scheduler the worker, in the middle of the next round trip: one call
        after another, that cost about 4 ms of each call's latency here.
        Held for ``Timings.linger_s``, the releases go out together.
        """
        self.lingering.append(future)
        if not self.letting_go:
            self.letting_go = True
            self.on_loop(self.loop.call_later, self.state.timings.linger_s, self._let_go)

    def _let_go(self) -> None:
        self.letting_go = False
        self.lingering = []

    @staticmethod
    def _spec(key, name, attempt, resources, topic, internal) -> dict:
        return {
            "key": key,
            "name": name,
            "attempt": attempt,
            "resources": resources or {},
            "topic": topic,
            "internal": internal,
        }

    def launch(self, launches: list) -> None:
        """Send attempts: direct calls as messages, the rest as Dask tasks, batched.

        An attempt that cannot be sent (its arguments do not serialize, its
        input is gone) ends at once as a failed attempt, which the state
        machine handles as any other failure.
        """
        batches: dict[tuple, list] = {}
        failed = []
        for launch in launches:
            if launch.kind == "create":
                self.creating(launch.obj_id, launch.task_id)
                if launch.obj_id in self.held_back:
                    self.held_back[launch.obj_id].append(launch)  # after the supply change
                    continue
            if any(key in self.batched for key in launch.inputs.values()):
                self._submit(batches)  # an input is in this very batch: send it first
                batches = {}
            try:
                if launch.direct_call:
                    self._send_direct(launch)
                    continue
                if launch.route == "direct":
                    self._send_task(launch)
                    continue
                fn, args, kwargs, topic = self._call_of(launch)
                if not launch.inputs:  # nothing for Dask to wire: the scheduler sees bytes
                    fn, args, kwargs = Sealed((fn, args, kwargs)), (), {}
            except Exception as exc:
                failed.append(ev.AttemptDone(launch.key, "error", exc))
                continue
            spec = self._spec(
                launch.key, launch.name, launch.attempt, launch.request, topic, launch.internal
            )
            options = (
                launch.workers,
                launch.strict,
                tuple(sorted(launch.request.items())),
                launch.priority,
            )
            batches.setdefault(options, []).append((launch, fn, spec, args, kwargs))
            self.batched.add(launch.key)
        failed += self._submit(batches)
        if failed:  # after the instructions being carried out now
            self.loop.add_callback(self.feed, *failed)

    def _submit(self, batches: dict) -> list:
        """Submit batched attempts, one ``map`` per set of options; the failures as events."""
        failed = []
        for (workers, strict, request, priority), batch in batches.items():
            pin = (
                {}
                if workers is None
                else {"workers": list(workers), "allow_other_workers": not strict}
            )
            common = {
                "pure": False,
                "resources": dict(request) or None,
                "priority": priority,
                "fifo_timeout": FIFO,
                **pin,
            }
            try:
                futures = self._map(batch, common)
            except Exception:  # find the culprit: one at a time
                futures = []
                for item in batch:
                    try:
                        futures += self._map([item], common)
                    except Exception as exc:
                        futures.append(None)
                        failed.append(ev.AttemptDone(item[0].key, "error", exc))
            for (launch, *_), future in zip(batch, futures, strict=True):
                self.batched.discard(launch.key)
                if future is not None:
                    self.track(launch.key, "dask", value=future)
                    self.start(self._watch, launch.key, future, launch.fetch)
        return failed

    def _map(self, batch: list, options: dict) -> list:
        keys = [spec["key"] for _, _, spec, _, _ in batch]
        if len(batch) == 1:
            _, fn, spec, args, kwargs = batch[0]
            return [self.client.submit(run_task, fn, spec, args, kwargs, key=keys[0], **options)]
        columns = zip(*[item[1:] for item in batch], strict=True)
        return self.client.map(run_task, *columns, key=keys, **options)

    def _call_of(self, launch: ev.Launch) -> tuple:
        """``(fn, args, kwargs, topic)`` of a launch, inputs resolved to Dask futures."""
        if launch.kind == "task":
            fn, args, kwargs, topic = self.tasks[launch.task_id].payload
            args, kwargs = resolve_inputs((args, kwargs), launch.inputs, self.result_of)
            return fn, args, kwargs, topic
        factory, fargs, fkwargs, topic = self.recipe_of(launch.obj_id)
        if launch.kind == "create":
            return (
                create_object,
                (launch.obj_id, launch.seq, factory, fargs, fkwargs, launch.state),
                {},
                topic,
            )
        if launch.kind == "destroy":
            return destroy_object, (launch.obj_id, launch.seq), {}, topic
        method, margs, mkwargs = self._method_of(launch)
        margs, mkwargs = resolve_inputs((margs, mkwargs), launch.inputs, self.result_of)
        return call_object, (launch.obj_id, launch.seq, method, margs, mkwargs), {}, topic

    def _method_of(self, launch: ev.Launch) -> tuple:
        if launch.kind == "snapshot":
            return "get_state", (), {}
        payload = self.payload_of(launch.args_of or launch.task_id)
        if payload is None:
            raise KeyError(f"the arguments of {launch.name} are gone")
        return payload[:3]

    async def _watch(self, key: str, future, fetch: bool) -> None:
        status, error = await dask_compat.outcome(future)
        value = None
        if status == "finished" and fetch:
            try:
                value = await self.client.gather(future, asynchronous=True)
            except Exception as exc:
                status, error = "error", exc
        if status != "finished" and self.client.status not in CONNECTED:
            self.feed(ev.SchedulerLost(str(self.lost_scheduler())))  # Dask cancelled it all
            return
        if status == "cancelled":  # not by us (then nobody waits here): its inputs vanished
            lost = tuple(t for t, f in self.put_futures.items() if f.status == "cancelled")
            self.feed(ev.InputsLost(key, lost))
            return
        if isinstance(error, KilledWorker) and error.task != key:
            # Not this attempt's worker: an input's (a put value being sent again) died
            # while it was computed. The put goes out again; the attempt is not to blame.
            lost = tuple(t for t, f in self.put_futures.items() if f.key == error.task)
            if lost:
                self.feed(ev.InputsLost(key, lost))
                return
        lost = isinstance(error, (KilledWorker, WorkerLostError))
        self.feed(ev.AttemptDone(key, status, error, lost, value))

    # --- the direct route: plain tasks on the engine's own streams -------------------

    def _send_task(self, launch: ev.Launch) -> None:
        fn, args, kwargs, topic = self.tasks[launch.task_id].payload
        address = launch.workers[0]
        channel = self._channel(address)
        sent = {}  # a put's value goes on the stream once; the task names it
        for task_id, key in launch.inputs.items():
            if task_id in self.put_values:
                channel.put(key, task_id, self.put_values[task_id])
                sent[task_id] = KeptInput(key, address)
        args, kwargs = resolve_inputs((args, kwargs), launch.inputs, self.result_of, sent)
        spec = self._spec(
            launch.key, launch.name, launch.attempt, launch.request, topic, launch.internal
        )
        spec["watched"] = launch.watched
        self.track(launch.key, "stream", address, sent=launch.name)
        channel.run(launch.key, spec, fn, args, kwargs)

    def _channel(self, address: str) -> TaskChannel:
        """The stream of tasks and direct calls to ``address``, opened on first use."""
        channel = self.channels.get(address)
        if channel is None or channel.closed:
            channel = self.channels[address] = TaskChannel(
                address, self.client.connection_args, self._task_answers, self._stream_closed
            )
        return channel

    def _task_answers(self, address: str, answers: list) -> None:
        """A worker's answers on a task stream, handled together (on the event loop)."""
        events = []
        for answer in answers:
            events += self._answer_events(address, *answer)
        if events:
            self.feed(*events)

    def _answer_events(self, address: str, kind: str, key: str, status, value, elapsed) -> list:
        if kind == "done" and self.awaits(key, "call"):
            return self._call_answer(address, key, status, value, elapsed)
        if kind != "done":
            if not self.awaits(key, "stream"):
                return []
            if kind == "started":
                return [ev.Started(key, address)]
            return [ev.AttemptWaits(key, kind == "waiting")]
        sent = self.answered(key, "stream")
        if sent is None:  # dropped meanwhile (cancelled, or its worker counted as lost)
            if status == "kept" and address in self.channels:
                self.channels[address].release(key)
            return []
        timed = [] if elapsed is None else [ev.Ended(key, sent[1], address, elapsed, 0.0)]
        if status in ("OK", "kept"):
            if status == "kept":
                value = Kept(address, key, value)
                weakref.finalize(value, self._release_kept, address, key)
            else:
                value = Local(value)
            self.finished(key, value)
            return [*timed, ev.AttemptDone(key, "finished")]
        if status == "cancelled":
            return [ev.AttemptDone(key, "cancelled")]
        if status == "input-lost":
            lost = WorkerLostError(f"{sent[1]}: its input {value} was lost with its worker")
            return [ev.AttemptDone(key, "error", lost, worker_lost=True)]
        return [*timed, ev.AttemptDone(key, "error", value)]

    def _stream_closed(self, address: str, keys: tuple) -> None:
        """A task stream broke: its worker died or cannot be reached."""
        channel = self.channels.get(address)
        if channel is not None and channel.closed:
            del self.channels[address]  # a new one is opened if tasks go there again
        calls = [key for key in keys if self.awaits(key, "call")]
        if calls and not self.closed:
            self.start(self._calls_cut, address, calls)
        lost = [key for key in keys if self.answered(key, "stream") is not None]
        error = WorkerLostError(f"lost the task stream to worker {address}", address=address)
        events = [ev.AttemptDone(key, "error", error, worker_lost=True) for key in lost]
        # Not inside the handling that sent them; the worker first, so that what runs
        # again is not sent there.
        self.loop.add_callback(self.feed, ev.StreamLost(address), *events)

    def _release_kept(self, address: str, key: str) -> None:
        """A kept result's last reference went: the worker may let it go (any thread)."""
        if not self.closed:
            self.on_loop(self._tell_release, address, key)

    def _tell_release(self, address: str, key: str) -> None:
        channel = self.channels.get(address)
        if channel is not None and not channel.closed:
            channel.release(key)

    async def _fetch_kept(self, kept: list) -> list:
        """The values of results kept on workers; :class:`ResultsLost` for those gone."""

        async def one(item: Kept):
            if item.address in self.state.silent:  # known frozen: not waited for
                return ResultsLost(
                    f"the result of {item.key} is held by {item.address}, which stopped reporting",
                    (item.key,),
                    address=item.address,
                    silent=True,
                )
            try:  # None: the holder stopped reporting
                response = await self._ask_worker(
                    item.address,
                    PEER_CONNECT_S,
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
            silent = response is None or item.address in await self._silent_workers()
            return ResultsLost(
                f"the result of {item.key} was lost with its worker {item.address}"
                + (", which stopped reporting" if silent else ""),
                (item.key,),
                address=item.address,
                silent=silent,
            )

        found = await asyncio.gather(*[one(item) for item in kept])
        lost = [f for f in found if isinstance(f, ResultsLost)]
        if lost:  # all those lost the same way together: one run again for them all
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

    def worker_stories(
        self, places: dict[str, set[str]], dask_keys: set[str] = frozenset()
    ) -> list[tuple]:
        """The workers' half of attempts' stories, ``(age, address, key, what)`` each,
        asked at once: of every worker in ``places`` (address -> keys of attempts sent
        on its stream), and for ``dask_keys`` (attempts on Dask's route) of Dask's
        scheduler and of every worker the engine knows, as ``client.story`` asks them.
        One that does not answer within ``Timings.story_ask_s`` says so instead (a
        frozen worker takes the connection and never answers; ``client.story`` would
        wait for it)."""
        if not (places or dask_keys) or self.closed:
            return []
        return self.client.sync(self._worker_stories, places, dask_keys)

    async def _worker_stories(self, places: dict, dask_keys: set[str]) -> list[tuple]:
        ask_s = self.state.timings.story_ask_s

        async def one(address: str, keys: set[str]) -> list[tuple]:
            asked_at = time.monotonic()
            try:
                entries = await self._ask_worker(
                    address,
                    ask_s,
                    lambda ask: asyncio.wait_for(ask, ask_s),
                    STORY_HANDLER,
                    keys=sorted(keys),
                )
            except Exception as exc:  # gone, frozen, or no task service there
                return [(0.0, address, "", f"did not tell its half ({type(exc).__name__})")]
            # The worker's ages are of about halfway through the ask: made ages of its end.
            late = (time.monotonic() - asked_at) / 2
            return [(age + late, address, key, what) for age, key, what in entries]

        asks = [one(a, k) for a, k in sorted(places.items())]
        if dask_keys:
            keys = sorted(dask_keys)
            asks.append(self._dask_story("scheduler", keys))
            asks += [self._dask_story(a, keys) for a in sorted(self.state.nthreads)]
        found = await asyncio.gather(*asks)
        return [entry for entries in found for entry in entries]

    async def _dask_story(self, address: str, keys: list[str]) -> list[tuple]:
        """Dask's story of ``keys`` as the scheduler (``address="scheduler"``) or a
        worker keeps it: its records of those keys, aged by the wall clock (Dask's
        logs stamp ``time()``)."""
        ask_s = self.state.timings.story_ask_s
        try:
            if address == "scheduler":
                asked = self.client.scheduler.get_story(keys_or_stimuli=keys)
                records = await asyncio.wait_for(asked, ask_s)
            else:
                records = await self._ask_worker(
                    address,
                    ask_s,
                    lambda ask: asyncio.wait_for(ask, ask_s),
                    "get_story",
                    keys_or_stimuli=keys,
                )
        except Exception as exc:  # gone, frozen
            return [(0.0, address, "", f"did not tell its part ({type(exc).__name__})")]
        now, wanted, found = time.time(), set(keys), []
        for record in records:
            entry = dask_record(record)
            if entry is not None and entry[0] in wanted:
                key, what, stamp = entry
                found.append((max(0.0, now - stamp), address, key, what))
        return found

    async def _ask_worker(self, address: str, connect_s: float, answer, handler: str, **msg):
        """What ``address``'s ``handler`` answers to ``msg``, awaited by ``answer(ask)``
        (None: given up). The connect is bounded too: Dask retries a refused one (a dead
        worker) for 30 s. The connection is reused after an answer, dropped otherwise."""
        pool = self.client.rpc
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

    async def _answer_unless_silent(self, ask, address: str):
        """``ask``'s answer, or None once ``address`` stopped reporting (a stopped process
        accepts the connection and never answers; a large value may take long)."""
        answer = asyncio.ensure_future(ask)
        while True:
            done, _ = await asyncio.wait([answer], timeout=self.state.timings.holder_silent_s)
            if done:
                return answer.result()
            if address in await self._silent_workers():
                answer.cancel()
                return None

    async def _heartbeats(self) -> dict | None:
        """When the scheduler last heard from each worker (see
        `dask_compat.worker_heartbeats`), or None if it could not say."""
        try:
            return await dask_compat.worker_heartbeats(self.client)
        except (OSError, KeyError, TypeError):  # the scheduler is busy or different
            return None

    async def _silent_workers(self, seen: dict | None = None) -> set:
        """The workers that stopped reporting (see `dask_compat.silent_among`), as the
        workers' heartbeats say now; what is new goes to the state (``WorkerSilent``,
        as the scheduler plugin's events: the engine knows one set of silent workers)."""
        seen = await self._heartbeats() if seen is None else seen
        if seen is None:
            return set()
        silent = dask_compat.silent_among(seen, self.state.timings.holder_silent_s)
        known = self.state.silent
        news = [ev.WorkerSilent(a) for a in sorted(silent - known)]
        news += [ev.WorkerSilent(a, silent=False) for a in sorted(known - silent) if a in seen]
        if news:
            self.feed(*news)
        return silent

    # --- direct calls -------------------------------------------------------------

    def _send_direct(self, launch: ev.Launch) -> None:
        address = launch.workers[0]
        topic = self.recipe_of(launch.obj_id)[3]
        method, margs, mkwargs = self._method_of(launch)
        spec = self._spec(launch.key, launch.name, launch.attempt, {}, topic, launch.internal)
        spec["keep"] = self.keeps(launch.args_of or launch.task_id)
        # Not followed by speculation: the call's time comes with its reply, and no
        # start or end report travels through the scheduler. Such a call does not
        # count as busy on its worker: it runs in its object's threads, not Dask's.
        spec["quiet"] = not launch.watched
        self.track(launch.key, "call", address)
        self.start(self._direct, launch, address, spec, method, (margs, mkwargs))

    async def _direct(self, launch: ev.Launch, address: str, spec: dict, method, arguments):
        """Send a direct call on the stream to its object's worker once the object
        exists and the direct calls it takes as inputs have finished."""
        try:
            await self._created(launch, address)
            await self._inputs_done(launch, arguments)
        except WorkerLostError as exc:
            self.feed(ev.AttemptDone(launch.key, "error", exc, worker_lost=True))
            return
        except Exception as exc:  # the object did not start, or an input failed
            self.feed(ev.AttemptDone(launch.key, "error", exc))
            return
        # A frozen worker takes what is sent and answers nothing: a shared value goes
        # to it whole, and the other workers fetch it from one that reports.
        (args, kwargs), values = direct_arguments(
            finished_inputs(arguments), address, may_hold=address not in self.state.silent
        )
        call = (launch.obj_id, launch.seq, method, args, kwargs)
        self.sent_on(launch.key, "call", address, (launch, spec, call, values))
        self._channel(address).call(launch.key, spec, call)

    async def _inputs_done(self, launch: ev.Launch, arguments) -> None:
        """Wait for the direct calls among ``arguments`` that have not finished; if one
        failed, this call will never run: its turn on the worker is skipped and the
        input's error raised (`InputFailedError`)."""
        found: list[TaskRef] = []
        collect_refs(arguments, found)
        for ref in found:
            if not ref.outcome.done():
                await asyncio.wait([asyncio.wrap_future(ref.outcome)])
            error = ref.outcome.exception()
            if error is not None:
                self._skip_calls(launch.obj_id, launch.workers[0], (launch.seq,))
                if isinstance(error, WorkerLostError):
                    raise WorkerLostError(
                        f"{launch.name}: its input {ref.name!r} was lost with its worker"
                    ) from error
                raise InputFailedError(f"{launch.name}: its input {ref.name!r} failed") from error

    def _skip_calls(self, obj_id: str, address: str, seqs: tuple) -> None:
        """Tell the object's worker that calls ``seqs`` will never run."""
        spec = self._spec(self.state.new_key("skip"), "skip", 0, {}, self.topic, True)
        future = self.client.submit(
            run_task,
            skip_calls,
            spec,
            (obj_id, list(seqs)),
            {},
            key=spec["key"],
            pure=False,
            workers=[address],
            allow_other_workers=False,
        )
        fire_and_forget(future)

    def _call_answer(self, address: str, key: str, status, value, elapsed) -> list:
        """The events of a direct call's answer; a call whose shared input was lost
        with its holder goes again, once, with the values themselves."""
        _, (launch, spec, call, values) = self.answered(key, "call")
        if status == "input-lost":
            if values:
                self.sent_on(key, "call", address, (launch, spec, call, {}))
                self._channel(address).call(key, spec, inline(call, values))
                return []
            lost = WorkerLostError(f"{launch.name}: its shared input {value} was lost")
            return [ev.AttemptDone(key, "error", lost)]
        if status == "unsent":  # it never left: the calls after it must not wait for it
            self._skip_calls(call[0], address, (call[1],))
            return [ev.AttemptDone(key, "error", value)]
        timed = [] if elapsed is None else [ev.Ended(key, launch.name, address, elapsed, 0.0)]
        if status == "kept":  # it stays on the worker until its last TaskRef goes
            kept = Kept(address, key, value)
            weakref.finalize(kept, self._release_kept, address, key)
            self.finished(key, kept)
            return [*timed, ev.AttemptDone(key, "finished")]
        if status != "OK":
            return [*timed, ev.AttemptDone(key, "error", value)]
        self.finished(key, Local(value))
        return [*timed, ev.AttemptDone(key, "finished", value=value if launch.fetch else None)]

    async def _calls_cut(self, address: str, keys: list) -> None:
        """Direct calls whose stream broke. Lost with their worker if it left the
        cluster (its object is then made again); if it still runs after
        ``Timings.call_cut_check_s``, they fail with the broken connection and the object
        stays: a stateful call that may have run is not taken for one that did not."""
        if self.client.status not in CONNECTED:  # the workers went with their scheduler
            self.feed(ev.SchedulerLost(str(self.lost_scheduler())))
            return
        gone = await self._worker_left(address, self.state.timings.call_cut_check_s)
        events = []
        for key in keys:
            sent = self.answered(key, "call")
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
            self.feed(*events)

    async def _worker_left(self, address: str, within_s: float) -> bool:
        """Whether the scheduler drops ``address`` from its workers within ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                if address not in await dask_compat.worker_heartbeats(self.client):
                    return True
            except (OSError, KeyError, TypeError):  # the scheduler is busy or gone
                pass
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)

    async def _created(self, launch: ev.Launch, address: str) -> None:
        """Wait for the object's creation; raise as a pinned call would if it failed."""
        creation = self.creation_of(launch.obj_id)
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

    # --- the cluster (admin thread) -------------------------------------------------

    def _change_supply(self, ins: ev.Supply) -> None:
        client = self.client
        record = ["hrl-tasks", "held", ins.address, ins.obj_id]
        # Readers add what is held to what a worker advertises (see `see_workers`): the
        # advertised supply falls before a holding is recorded, and a release is recorded
        # before it rises, so a read between the two steps finds less room, never more.
        try:
            if self.closed or client.status not in CONNECTED:
                return  # the engine closed: the supply goes with the cluster or its client
            if next(iter(ins.delta.values())) > 0:
                client.set_metadata(record, ins.held)
                client.run(change_supply, ins.delta, workers=[ins.address])
                client.run_on_scheduler(schedule_unrunnable, worker=ins.address)
            else:
                client.run(change_supply, ins.delta, workers=[ins.address])
                client.set_metadata(record, ins.held)
        except (OSError, KeyError, ValueError):
            pass  # the worker is gone; so is what it advertised
        finally:
            self.loop.add_callback(self._supply_changed, ins.obj_id)

    def _supply_changed(self, obj_id: str) -> None:
        waiting = self.held_back.pop(obj_id, [])
        if waiting:
            self.launch(waiting)

    def refresh(self) -> None:
        """Read the workers on the admin thread; they come back as :class:`WorkersSeen`."""
        if self.refreshing:
            self.refresh_again = True
            return
        self.refreshing = True
        try:
            self.reader.submit(self._refresh)
        except RuntimeError:  # the interpreter is exiting with the engine still open
            self.refreshing = False

    def _refresh(self) -> None:
        try:
            seen = self.see_workers()
        except Exception:  # the scheduler is busy or going away: the next sweep tries again
            seen = None
        if self.client.status not in CONNECTED:
            # A client that lost its scheduler reads no workers: that says nothing of the
            # workers, and the scheduler check reports the loss itself.
            seen = None
        self.loop.add_callback(self._refreshed, seen)

    def _refreshed(self, seen) -> None:
        self.refreshing = False
        if seen is not None:
            self.feed(seen)
        if self.refresh_again:
            self.refresh_again = False
            self.refresh()

    def read_workers(self) -> dict:
        """address -> (threads, resources declared), resources held by objects included
        (the engine lowers what a worker advertises while an object holds them)."""
        return self.see_workers().workers

    def see_workers(self) -> ev.WorkersSeen:
        """The workers (see `read_workers`) and what every engine's objects hold on them."""
        # One read of both: read apart, a holding made between them counts twice.
        workers, held = self.client.run_on_scheduler(workers_and_holdings, ["hrl-tasks", "held"])
        found = {}
        holders = {}
        for address, (threads, advertised) in workers.items():
            declared = dict(advertised or {})
            holders[address] = {
                h: dict(r) for h, r in ((held or {}).get(address) or {}).items() if r
            }
            for request in holders[address].values():
                for name, amount in request.items():
                    declared[name] = declared.get(name, 0.0) + amount
            found[address] = (int(threads or 1), declared)
        return ev.WorkersSeen(found, holders)

    # --- results (user threads) -------------------------------------------------------

    def gather(self, refs: list, timeout: float | None) -> list:
        """The results of ``refs`` in order; raises the first error among them.

        Two routes, each the faster one measured for its kind: stateful-worker
        calls, direct calls and the direct route's tasks are awaited here, on
        their outcomes, and what is not in this process is then fetched in one
        batch (a pinned task took 8.5-9 ms as one ``client.sync`` round trip,
        7.4-7.8 ms so; a direct-route task's small result needs no hop to the
        event loop at all); the Dask route's tasks are awaited and fetched in
        one round trip on the event loop (6.2 ms against 7.0-7.6 ms).
        """
        if not all(ref.pinned or ref.route == "direct" for ref in refs):
            return self.client.sync(self._gather, refs, callback_timeout=timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for ref in refs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(ref.outcome.result(left))
            except cf.TimeoutError:
                raise TimeoutError(f"task {ref.name!r} not done within {timeout} s") from None
        if all(isinstance(v, Local) for v in values):  # no hop to the event loop
            return [v.value for v in values]
        if not all(ref.pinned for ref in refs) or any(isinstance(v, Kept) for v in values):
            # kept on workers, or in Dask
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self.client.sync(self._gather, refs, callback_timeout=left)
        remote = [v for v in values if not isinstance(v, Local)]
        fetched = iter(self.client.sync(self._fetch, remote, remote))
        return [v.value if isinstance(v, Local) else next(fetched) for v in values]

    async def _gather(self, refs: list) -> list:
        values = []
        for ref in refs:  # in order: the first error among them is raised
            if not ref.outcome.done():
                mirror = asyncio.wrap_future(ref.outcome)
                await asyncio.wait([mirror])
                if not mirror.cancelled():
                    mirror.exception()  # read here, raised below: asyncio must not warn
            values.append(ref.outcome.result())  # raises the task's own error, as it was
        kept = [v for v in values if isinstance(v, Kept)]
        remote = [v for v in values if not isinstance(v, (Local, Kept))]
        pinned = [v for v, ref in zip(values, refs, strict=True) if ref.pinned and v in remote]
        again = [v for v, ref in zip(values, refs, strict=True) if ref.recipe and v in remote]
        fetched = iter(await self._fetch(remote, pinned, again) if remote else ())
        from_workers = iter(await self._fetch_kept(kept) if kept else ())
        return [
            v.value
            if isinstance(v, Local)
            else next(from_workers)
            if isinstance(v, Kept)
            else next(fetched)
            for v in values
        ]

    async def _fetch(self, futures: list, pinned: list, recomputable: list = ()) -> list:
        """The values of finished ``futures``; a liveness check instead of a hang.

        Dask recomputes a result lost with its worker, but not one pinned to that
        worker (a stateful call's): it would wait forever for the worker to come
        back. Such a loss raises :class:`WorkerLostError` within ``Timings.fetch_check_s``.
        A fetch still going after ``Timings.holder_silent_s`` looks for results of
        ``recomputable`` futures held only by workers that stopped reporting (a
        frozen process: the fetch would wait for it to run again, or for Dask's 30 s
        connect time-out) and raises :class:`ResultsLost` for them, naming the
        worker: the engine runs those tasks again elsewhere.
        """
        fetch = asyncio.ensure_future(self.client.gather(futures, asynchronous=True))
        ask_at = time.monotonic() + self.state.timings.holder_silent_s
        while True:
            done, _ = await asyncio.wait([fetch], timeout=self.state.timings.fetch_check_s)
            if done:
                try:
                    return fetch.result()
                except BaseException as exc:
                    if self.client.status not in CONNECTED:
                        raise self.lost_scheduler() from exc
                    if not isinstance(
                        exc, (KilledWorker, cf.CancelledError, asyncio.CancelledError)
                    ):
                        raise
                    # Lost with its worker, and Dask could not compute it again: what
                    # it was computed from died too (a put has no recipe), or so did
                    # the worker computing it again (the embedded cluster allows no
                    # failure). The engine runs such tasks again.
                    lost = tuple(f.key for f in futures if f.status != "finished")
                    if not lost:
                        raise
                    raise ResultsLost(
                        f"the result of {lost[0]} was lost with its worker, and it could "
                        "not be computed again from what is left in the cluster",
                        lost,
                        address=getattr(getattr(exc, "last_worker", None), "address", None),
                    ) from exc
            if self.client.status not in CONNECTED:
                fetch.cancel()
                raise self.lost_scheduler()
            lost = [f for f in pinned if f.status != "finished"]
            if lost:
                fetch.cancel()
                raise WorkerLostError(
                    f"the result of {lost[0].key} was lost with the worker that held it"
                )
            if recomputable and time.monotonic() >= ask_at:
                ask_at = time.monotonic() + self.state.timings.holder_silent_s
                silent = await self._silent_holders(recomputable)
                if silent:
                    fetch.cancel()
                    key, address = next(iter(silent.items()))
                    raise ResultsLost(
                        f"the result of {key} is held by {address}, which stopped "
                        "reporting to the scheduler",
                        tuple(silent),
                        address=address,
                        silent=True,
                    )

    async def _silent_holders(self, futures: list) -> dict:
        try:
            return await dask_compat.silent_holders(
                self.client, [f.key for f in futures], self.state.timings.holder_silent_s
            )
        except (OSError, KeyError, TypeError):  # the scheduler is busy or different: wait on
            return {}

    def place(self, value, task_id: str, broadcast: bool = False):
        """Put ``value`` in the cluster once (``engine.put``), on every worker if
        ``broadcast``; its Dask future.

        The value goes to one worker; with ``broadcast`` it is then copied to the
        others, and the put returns once the copies are there or, should that take
        ``Timings.place_check_s`` (or should a worker be known to have stopped reporting),
        once a worker that still reports holds one (the rest go on in the
        background): a frozen worker, which accepts a connection and never answers,
        holds up neither the put nor the tasks that read it. Dask's copies wait
        for each other (``Scheduler.replicate`` holds one lock until every recipient
        answers), so a copy to a frozen worker would hold up every later put. The
        value stays here too while its ref is held: if the worker holding it
        dies, it is sent again (see :class:`~hrl_tasks.scheduler.events.Resend`)."""
        tries = 0
        while True:
            if self.lost is not None:
                raise self.lost
            try:
                future = self.client.sync(self._scatter, value, broadcast)
                break
            except OSError:  # sent to a worker that just died: the scheduler drops it soon
                tries += 1
                wait_s = self.state.timings.place_retry_after(tries)
                if wait_s is None:
                    raise
                time.sleep(wait_s)
        self.put_values[task_id], self.put_futures[task_id] = value, future
        return future

    async def _scatter(self, value, broadcast: bool = False):
        """``value``'s future once a worker that reports holds it (see `place`)."""
        while True:
            future = await self._scatter_once(value)
            if not broadcast or await self._copied(future):
                return future
            # Its only holder stopped reporting before a copy left it: again, elsewhere.

    async def _scatter_once(self, value):
        """``value``'s future once a worker holds it. A scatter still going after
        ``Timings.place_check_s`` looks for workers that stopped reporting and, if there are
        any, goes again to the others (a slow transfer is waited for); later puts
        leave those workers out until they report again."""
        silent = self.state.silent
        target = await self._reporting_workers() if silent else None
        scatter = self._scatter_to(value, target)
        while True:
            done, _ = await asyncio.wait([scatter], timeout=self.state.timings.place_check_s)
            if done:
                return scatter.result()[0]
            reporting = await self._reporting_workers()
            if reporting is not None and (target is None or silent & set(target)):
                scatter.cancel()
                target = reporting
                scatter = self._scatter_to(value, target)

    async def _copied(self, future) -> bool:
        """Copy ``future``'s value to every worker; False if its only holders stopped
        reporting before it was copied (it must go elsewhere)."""
        silent, timings = self.state.silent, self.state.timings
        reporting = await self._reporting_workers() if silent else None
        copying = asyncio.ensure_future(  # to the workers that report, if some do not
            self.client.replicate([future], workers=reporting, asynchronous=True)
        )
        # Dask makes copies under one lock, held by a copy to a frozen worker until it
        # answers: with a silent worker known, a holder that reports is looked for soon.
        wait_s = timings.place_poll_s if reporting is not None else timings.place_check_s
        while True:
            done, _ = await asyncio.wait([copying], timeout=wait_s)
            wait_s = timings.place_poll_s
            if done:  # a copy that failed (a worker left): tasks fetch from a holder
                if copying.exception() is not None:
                    logger.debug("a broadcast's copies did not all arrive: %r", copying.exception())
                return True
            reporting = await self._reporting_workers()
            try:
                holders = await dask_compat.holders(self.client, future.key)
            except (OSError, KeyError, TypeError):
                continue
            if not silent:
                continue  # a slow copy (or a freeze not yet seen): wait on
            if any(address not in silent for address in holders):
                self.start(self._finish_copies, copying)
                return True  # a worker that reports holds it: the rest copy in the background
            if reporting is not None:
                copying.cancel()
                return False

    @staticmethod
    async def _finish_copies(copying: asyncio.Future) -> None:
        try:
            await copying
        except Exception as exc:  # a worker left mid-copy: tasks fetch from a holder
            logger.debug("a broadcast's copies did not all arrive: %r", exc)

    def _scatter_to(self, value, workers: list | None) -> asyncio.Future:
        return asyncio.ensure_future(  # a list: not a dict's items
            self.client.scatter([value], hash=False, workers=workers, asynchronous=True)
        )

    async def _reporting_workers(self) -> list | None:
        """The workers that still report if some do not, else None: any worker will do.
        What it finds goes to the state (``WorkerSilent``), whose ``silent`` set is
        the one the engine knows, also from the scheduler's events."""
        seen = await self._heartbeats()
        if seen is None:
            return None
        silent = await self._silent_workers(seen)
        reporting = [address for address in seen if address not in silent]
        return reporting if silent and reporting else None

    def close(self) -> None:
        self.closed = True
        self.admin.shutdown()
        self.reader.shutdown(wait=False)
        channels, self.channels = list(self.channels.values()), {}
        for channel in channels:
            self.on_loop(channel.close)
