"""Plain tasks sent straight to a worker (the direct route): the worker's side.

An engine opens one stream to each worker it sends tasks to (the
``hrl_tasks_tasks`` handler) and writes batches of messages on it; the worker
answers on the same stream as tasks end. Messages, engine to worker:

- ``("fn", fn_id, fn)``: a function, sent once per stream; tasks name it by id;
- ``("forget-fn", fn_id)``: no task names it any more (the engine keeps at most
  ``task_channel.FUNCTIONS_KEPT`` on a stream, and so does the worker);
- ``("run", key, spec, fn_id, args, kwargs)``: run one attempt;
- ``("cancel", key)``: drop it if it has not started (a running one runs on,
  out of its slot, and its end is not answered);
- ``("value", key, value)``: a put's value (``engine.put``), sent once per
  stream before the first task that takes it; those tasks name it by a
  ``KeptInput`` of this worker, and it is kept here until released or until
  the stream ends;
- ``("release", key)``: forget a result (or a put's value) kept here; the results
  a stream's tasks left here are forgotten ``KEPT_GRACE_S`` after the stream ends
  (its engine gone: a crashed driver leaks nothing for longer);
- ``("call", key, spec, call)``: a direct call to a stateful object living here
  (``call`` as :func:`~hrl_tasks.scheduler.worker_objects.run_call` takes it); it
  runs in the object's threads, not in a slot, and its answer is a ``"done"``
  with status ``"OK"``, ``"error"`` or ``"input-lost"`` (value: the key of the
  shared input that could not be fetched);
- ``("relay", [(address, key, spec, call), ...])``: a round of direct calls to
  objects on this worker and on others of its host, relayed from here
  (:mod:`~hrl_tasks.scheduler.relay`); their answers come in one message once
  the last has come, a host-mate's lost call as status ``"lost"`` (value: its
  worker's address);
- ``("recall", key, obj_id)``: the relay a call came through was lost: its answer
  again (each object's last ``RELAYED_KEPT`` are kept), when it ends if it runs, or
  status ``"never-came"``.

Worker to engine: ``("started", key, None, None, None)`` when a task whose spec
says ``watched`` (speculation follows it) starts; ``("waiting", key, ...)`` and
``("resumed", key, ...)`` when a task lends its slot to wait for other tasks and
when it goes on (a waiting task is not busy: the engine may send more); and
``("done", key, status,
value, elapsed)`` when a task ends: status ``"OK"``
with the value, ``"kept"`` with the result's size (a result of the worker's
``hrl-tasks.keep-from`` setting or more stays here, and peers or the engine fetch it
with the ``hrl_tasks_result`` handler), ``"error"`` with the exception, or
``"cancelled"``, or ``"input-lost"`` (a kept input could not be fetched; the
task did not run).

Every engine task on a worker takes one of its slots (:class:`Slots`), whatever
route or engine sent it: at most ``nthreads`` run at once, the rest wait in
order. A task waiting for other tasks lends its slot while it waits, and takes
one again before it goes on, ahead of tasks not started yet.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import contextlib
import pickle
import threading
import time
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize
from distributed.sizeof import sizeof

from hrl_tasks.scheduler import dask_compat, settings, wire
from hrl_tasks.scheduler.context import TaskContext
from hrl_tasks.scheduler.relay import HostRelay
from hrl_tasks.scheduler.settings import validating
from hrl_tasks.scheduler.shared import InputLostError, ask_peer_for, rebuilt
from hrl_tasks.scheduler.stream_state import (
    Cancel,
    Detach,
    Detached,
    DirectCall,
    Drop,
    DropLater,
    Fetch,
    FunctionForgotten,
    FunctionSent,
    InputLost,
    InputsFetched,
    Keep,
    KeptInput,
    LookAgain,
    Note,
    Posted,
    Release,
    ReleaseSlot,
    ResultKept,
    Run,
    RunnerEnded,
    RunTask,
    Send,
    SlotTaken,
    StartCall,
    StartRunner,
    StreamEnded,
    StreamState,
    Take,
    ValueSent,
    Waits,
    has_kept,
)
from hrl_tasks.scheduler.wire import TASKS_HANDLER, write_batches

RESULT_HANDLER = "hrl_tasks_result"
STORY_HANDLER = "hrl_tasks_story"
STORY_KEPT = 10_000
"""The worker's half of its tasks' stories: its last entries, for every stream (as
distributed's ``Worker.stimulus_log``, bounded by count, not by time)."""
PICKLED_MAX_BYTES = 1_000_000  # kept results up to this size go to a peer as one pickle
# While more of a stream's tasks wait to run, answers wait up to this long to go together
# (one message per task cost most of a short task's time); a last task's answer goes at once.
ANSWER_BATCH_S = 0.002
KEPT_GRACE_S = 120.0
"""How long the results a stream's tasks left here outlive the stream: peers may still
fetch them meanwhile (a task of another engine's stream that names one)."""
POOL_THREADS = 1024  # threads for the tasks of every stream: slots plus waiting parents
RELAY_CONNECT_S = 5.0  # a relay's stream to a host-mate (as the engine's `stream_connect_s`)
RELAYED_KEPT = 2
"""Answers kept per object of the calls that came through a relay (a round's sample
each), sent again to an engine that lost that relay (``("recall", key, obj_id)``)."""


class TooManyWaitingError(RuntimeError):
    """A task would wait for others while so many already wait on its worker that no
    thread would be left to run the tasks they wait for."""


def may_wait(waiting: int, slots: int, threads: int = POOL_THREADS) -> bool:
    """Whether one more task may wait for others (lending its slot) when ``waiting``
    already do: each waiting task holds a pool thread, and the ``slots`` running tasks
    need theirs. Pure."""
    return waiting + 1 + slots <= threads


class InputGone(Exception):
    """A kept input could not be had: its worker is gone or does not answer."""


async def resolve_kept(service: TaskService, obj):
    """``obj`` with each :class:`KeptInput` replaced by its value (fetched once per key)."""
    found: dict[str, Any] = {}

    async def walk(item):
        if isinstance(item, KeptInput):
            if item.key not in found:
                found[item.key] = await service.fetch(item)
            return found[item.key]
        if isinstance(item, (list, tuple, set, frozenset)):
            return rebuilt(item, [await walk(x) for x in item])
        if isinstance(item, dict):
            return {k: await walk(v) for k, v in item.items()}
        return item

    return await walk(obj)


class Slots:
    """A worker's engine-task slots: at most ``limit`` tasks hold one at once.

    Tasks that go on after a wait (:meth:`take_back`) come before tasks that
    have not started (:meth:`acquire`): a parent resumes before more children
    start, as Dask's ``rejoin`` does.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self.resuming = 0
        self.cond = threading.Condition()
        self.on_free: list = []  # callables told when a slot frees (the stream dispatchers)

    def try_acquire(self) -> bool:
        with self.cond:
            if self.held < self.limit and not self.resuming:
                self.held += 1
                return True
            return False

    def acquire(self) -> None:
        """Block until a slot is free and take it (the Dask route's tasks)."""
        with self.cond:
            self.cond.wait_for(lambda: self.held < self.limit and not self.resuming)
            self.held += 1

    def release(self) -> None:
        with self.cond:
            self.held -= 1
            self.cond.notify_all()
        self._tell()

    def lend(self) -> None:
        """The calling task waits for others: its slot goes to them meanwhile."""
        self.release()

    def take_back(self) -> None:
        """Block until a slot frees, ahead of tasks not started yet, and take it."""
        with self.cond:
            self.resuming += 1
            self.cond.wait_for(lambda: self.held < self.limit)
            self.resuming -= 1
            self.held += 1
            self.cond.notify_all()

    def _tell(self) -> None:
        for callback in list(self.on_free):
            callback()


class TaskStream:
    """One engine's stream of tasks to this worker: queued in order, run in slots.

    What the stream holds and decides is its :class:`StreamState`; this class
    carries out its instructions: the socket, the runner threads, the slots.
    A thread that takes a slot runs the stream's queued tasks one after another
    while it keeps the slot; it gives the slot back when the queue is empty, when
    a waiting task is to go on (resuming tasks come first), or when another
    engine's stream has tasks waiting (streams take turns).
    """

    def __init__(self, service: TaskService, stream):
        self.service = service
        self.stream = stream  # a `wire` stream
        self.loop = asyncio.get_running_loop()
        self.state = StreamState(validate=validating())
        self.lock = threading.Lock()  # the state: fed on the event loop and in threads
        self.outbox: list = []
        self.wake = asyncio.Event()
        self.wake_due = False  # a write of held answers is scheduled
        self.done_lock = threading.Lock()
        self.done: list = []
        self.posted = False
        self.relay = None  # a HostRelay, once a round is relayed through here

    @property
    def closed(self) -> bool:
        return self.state.closed

    def handle(self, *events) -> list:
        """The state advanced by ``events`` (from the loop or a thread): its instructions."""
        with self.lock:
            return self.state.handle(*events)

    async def serve(self) -> None:
        writer = asyncio.ensure_future(self._write())
        self.service.slots.on_free.append(self._on_free)
        self.service.streams.append(self)
        try:
            while True:
                for message in await self.stream.receive():
                    if message[0] == "relay":
                        self._relay(message[1])
                    elif message[0] == "recall":
                        self._recall(message[1], message[2])
                    else:
                        self._carry_out(self.handle(received(message)))
                self._dispatch()
        except OSError:  # the engine went away: its queued tasks go with it
            pass
        finally:
            if self.relay is not None:
                self.relay.close()
            self.service.slots.on_free.remove(self._on_free)
            self.service.streams.remove(self)
            self._carry_out(self.handle(StreamEnded()))
            writer.cancel()

    def has_queued(self) -> bool:
        return bool(self.state.queued)

    def _carry_out(self, instructions: list) -> None:
        """Do what the state said, on the event loop (a runner's own instructions are
        carried out in its thread: `_runner`)."""
        service = self.service
        for i in instructions:
            kind = type(i)
            if kind is Note:
                service.note(i.key, i.what)
            elif kind is Send:
                self.outbox.append(i.message)
                if i.at_once:
                    self.wake.set()
            elif kind is Detach:
                if service.detach(i.key):
                    self._carry_out(self.handle(Detached(i.key)))
            elif kind is Fetch:
                asyncio.ensure_future(self._fetch_inputs(i))
            elif kind is Keep:
                service.kept[i.key] = i.value
            elif kind is Drop:
                service.kept.pop(i.key, None)
            elif kind is DropLater:
                service.forget_later(i.keys)
            elif kind is LookAgain:
                self._dispatch()
            elif kind is StartRunner:
                service.pool.submit(self._runner)
            elif kind is StartCall:
                asyncio.ensure_future(self._call(i.key, i.spec, i.call))
            else:
                raise AssertionError(f"the stream cannot carry out {i!r} on its loop")

    async def _call(self, key: str, spec: dict, call: tuple) -> None:
        run_call = self.service.run_call
        relayed = spec.get("relayed", False)
        if relayed:
            self.service.relayed_running.add(key)
        if run_call is None:  # no object was ever made here
            error = LookupError(f"no stateful object {call[0]} on this worker")
            out = ("done", key, "error", error, None)
        else:
            status, value, elapsed = await run_call(self.service.runtime, spec, call)
            out = ("done", key, status, value, elapsed)
        if relayed:
            self.service.relayed_done(call[0], out)
        if self.relay is None or not self.relay.answered(out):  # a round's goes with it
            self._answer(out)

    def _relay(self, items: list) -> None:
        """A round of direct calls to this worker and its host-mates (`relay`)."""
        if self.relay is None:
            worker = self.service.runtime.worker
            self.relay = HostRelay(
                worker.address, worker.connection_args, RELAY_CONNECT_S, self._answer_round
            )
        self.relay.relay(items, self._call_here)

    def _recall(self, key: str, obj_id: str) -> None:
        """The engine lost the relay a call of ``obj_id`` came through: its answer again
        (kept here), when it ends (it runs), or ``"never-came"`` (it did not get here)."""
        service = self.service
        found = service.relayed_answer(obj_id, key)
        if found is not None:
            self._answer(found)
        elif key in service.relayed_running:
            service.recalls.setdefault(key, []).append(self._answer)
        else:
            self._answer(("done", key, "never-came", None, None))

    def _call_here(self, key: str, spec: dict, call: tuple) -> None:
        self._carry_out(self.handle(DirectCall(key, spec, call)))

    def _answer_round(self, answers: list) -> None:
        """A relayed round's answers, in one message (on the event loop)."""
        self._carry_out(self.handle(*(Posted(out) for out in answers)))
        self.wake.set()

    async def _fetch_inputs(self, fetch: Fetch) -> None:
        try:
            args, kwargs = await resolve_kept(self.service, (fetch.args, fetch.kwargs))
        except InputGone as exc:
            self._carry_out(self.handle(InputLost(fetch.key, str(exc))))
            return
        found = InputsFetched(fetch.key, fetch.spec, fetch.fn, args, kwargs)
        self._carry_out(self.handle(found))
        self._dispatch()

    def _on_free(self) -> None:  # from any thread
        """A slot freed: start more of this stream's tasks, if it has any waiting (a task
        queued after this look is dispatched by the loop itself, as it queues it)."""
        if self.state.wants_runner():
            self.loop.call_soon_threadsafe(self._dispatch)

    def _dispatch(self) -> None:
        """Start a runner for queued tasks per free slot (on the event loop)."""
        slots = self.service.slots
        while self.state.wants_runner() and slots.try_acquire():
            self._carry_out(self.handle(SlotTaken()))

    def _runner(self) -> None:
        """Run queued tasks in a pool thread holding a slot, until it should give it back."""
        slots = self.service.slots
        holds = True
        try:
            while True:
                found = self.handle(Take())
                if not found:
                    break
                holds = self._run(found[0])  # not held: cancelled while it ran (detached)
                if not holds or slots.resuming or self.service.others_waiting(self):
                    break
        finally:
            for i in self.handle(RunnerEnded(holds)):
                if type(i) is ReleaseSlot:
                    slots.release()
                else:  # LookAgain: its slot went elsewhere
                    self._on_free()

    def _run(self, task: RunTask) -> bool:
        """Run one attempt in this runner's thread, holding its slot; whether the slot is
        still held after (not when the task was cancelled while it ran: it gave it back)."""
        key, spec = task.key, task.spec
        service = self.service
        runtime = service.runtime
        token = dask_compat.worker_context(runtime.worker)
        ctx = TaskContext(
            key,
            spec["name"],
            spec["attempt"],
            spec.get("resources") or {},
            spec["topic"],
            route="direct",
        )
        ctx.slots = service.slots
        ctx.on_wait = lambda waiting: self._waits(key, waiting)
        service.note(key, f"running in {threading.current_thread().name}")
        if spec.get("watched"):
            self._answer(("started", key, None, None, None))
        try:
            with runtime.reported(ctx, quiet=True):
                value = runtime.call_with_faults(spec, task.fn, task.args, task.kwargs)
            size = sizeof(value)
            if size >= service.keep_from:
                service.kept[key] = value
                for dropped in self.handle(ResultKept(key)):  # its stream had ended
                    service.kept.pop(dropped.key, None)
                out = ("done", key, "kept", size, ctx.elapsed)
            else:
                out = ("done", key, "OK", value, ctx.elapsed)
        except Exception as exc:
            out = ("done", key, "error", exc, ctx.elapsed)
        finally:
            dask_compat.reset_worker_context(token)
            with ctx.lock:
                ctx.finished = True
                holds_slot = not ctx.lent and not ctx.detached
        self._answer(out)
        return holds_slot

    def _waits(self, key: str, waiting: bool) -> None:
        """A task of this stream lends its slot to wait for others, or goes on: its
        runner does not count meanwhile (another may take the slot), and its engine
        is told."""
        self.service.count_waiting(+1 if waiting else -1)  # raises if one too many
        for i in self.handle(Waits(key, waiting)):
            self.service.note(i.key, i.what)
        self._answer(("waiting" if waiting else "resumed", key, None, None, None))

    def _answer(self, out: tuple) -> None:  # from a pool thread: one wake-up per batch
        with self.done_lock:
            self.done.append(out)
            post, self.posted = not self.posted, True
        if post and not self.closed:
            self.loop.call_soon_threadsafe(self._post)

    def _post(self) -> None:
        with self.done_lock:
            done, self.done, self.posted = self.done, [], False
        self._carry_out(self.handle(*(Posted(out) for out in done)))
        if not self.state.queued:
            self.wake.set()
        elif not self.wake_due:  # more to come soon: let answers gather
            self.wake_due = True
            self.loop.call_later(ANSWER_BATCH_S, self._wake_held)

    def _wake_held(self) -> None:
        self.wake_due = False
        self.wake.set()

    async def _write(self) -> None:
        await write_batches(self.stream, self.outbox, self.wake, self._unpicklable)

    def _unpicklable(self, message, exc: Exception) -> None:
        """A result (or error) that does not pickle: its task fails with that."""
        _, key, status, value, elapsed = message
        error = TypeError(
            f"the task's {'result' if status == 'OK' else 'error'} "
            f"{type(value).__name__} cannot be sent back: {exc!r}"
        )
        self.outbox.append(("done", key, "error", error, elapsed))
        self.wake.set()


def received(message: tuple):
    """The event a message from the engine is."""
    kind = message[0]
    if kind == "run":
        return Run(*message[1:])
    if kind == "cancel":
        return Cancel(message[1])
    if kind == "fn":
        return FunctionSent(message[1], message[2])
    if kind == "forget-fn":
        return FunctionForgotten(message[1])
    if kind == "value":
        return ValueSent(message[1], message[2])
    if kind == "release":
        return Release(message[1])
    if kind == "call":
        return DirectCall(*message[1:])
    raise ValueError(f"a task stream takes no {kind!r} message")


class TaskService:
    """The direct route on one worker: its slots, its streams and the results kept here."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.slots = Slots(runtime.worker.state.nthreads)
        self.kept: dict[str, Any] = {}
        # Results this large stay here: the worker's own ``hrl-tasks.keep-from`` setting
        # (100 kB by default, measured: docs/engine.md).
        self.keep_from = settings.value("keep-from")
        self.streams: list[TaskStream] = []
        # Direct calls' runner, `worker_objects.run_call`, set when an object is made here.
        self.run_call = None
        # Threads for tasks: as many as hold slots plus those waiting on children.
        self.pool = cf.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="hrl-task")
        self.threads = POOL_THREADS
        self.waiting = 0  # tasks of every stream waiting for others, each holding a thread
        self.waiting_lock = threading.Lock()
        self.kept_grace_s = KEPT_GRACE_S
        # Relayed calls (`relay`): each object's last answers, for an engine that lost
        # the relay they went back through; the keys running; who asked for which.
        self.relayed: dict[str, collections.deque] = {}
        self.relayed_running: set[str] = set()
        self.recalls: dict[str, list] = {}  # key -> its askers' answer functions
        self.story: collections.deque[tuple[float, str, str]] = collections.deque(maxlen=STORY_KEPT)

    def note(self, key: str, what: str) -> None:
        """An entry of ``key``'s story on this worker (from any thread: a deque's
        append is atomic)."""
        self.story.append((time.monotonic(), key, what))

    def story_of(self, keys) -> list[tuple[float, str, str]]:
        """The entries of ``keys`` kept here, oldest first: ``(age in seconds, key,
        what)`` (ages, not times: the asker's clock need not be this one's)."""
        keys, now = set(keys), time.monotonic()
        return [(now - at, key, what) for at, key, what in list(self.story) if key in keys]

    def relayed_done(self, obj_id: str, out: tuple) -> None:
        """A relayed call of ``obj_id`` ended with answer ``out``: kept (the object's
        last ``RELAYED_KEPT``), and sent to the streams that asked for it meanwhile."""
        key = out[1]
        self.relayed_running.discard(key)
        for tell in self.recalls.pop(key, ()):
            tell(out)
        if obj_id not in self.runtime.objects:  # it ended meanwhile: nothing to keep
            return
        answers = self.relayed.get(obj_id)
        if answers is None:
            answers = self.relayed[obj_id] = collections.deque(maxlen=RELAYED_KEPT)
        answers.append(out)

    def forget_relayed(self, obj_id: str) -> None:
        """``obj_id`` ended here: its kept answers go (from any thread)."""
        self.relayed.pop(obj_id, None)

    def relayed_answer(self, obj_id: str, key: str) -> tuple | None:
        """The kept answer of relayed call ``key`` of ``obj_id``, or None."""
        for out in self.relayed.get(obj_id, ()):
            if out[1] == key:
                return out
        return None

    def count_waiting(self, change: int) -> None:
        """One more task waits for others (+1), or one goes on (-1); a wait that would
        leave no thread for the tasks waited for raises instead (`may_wait`)."""
        with self.waiting_lock:
            if change > 0 and not may_wait(self.waiting, self.slots.limit, self.threads):
                raise TooManyWaitingError(
                    f"{self.waiting:,} tasks already wait for other tasks on worker "
                    f"{self.runtime.worker.address}, each holding one of its {self.threads:,} "
                    "threads: one more would leave none for the tasks they wait for. Let "
                    "fewer tasks wait at once (a parent that gathers its children, rather "
                    "than a task per child that waits for its own), or spread them over "
                    "more workers."
                )
            self.waiting += change

    def forget_later(self, keys: set[str]) -> None:
        """Results of a stream that ended: forgotten ``kept_grace_s`` from now (on the
        event loop), unless released before."""
        if not keys:
            return
        keys = set(keys)

        def forget():
            for key in keys:
                self.kept.pop(key, None)

        asyncio.get_running_loop().call_later(self.kept_grace_s, forget)

    async def serve_stream(self, comm, plain: bool = False) -> None:
        """An engine's stream: it asks whether to take the socket over (``plain``); the
        answer goes first, then neither end reads through Dask's comm again."""
        plain = plain and dask_compat.plain_socket_possible(comm)
        await comm.write({"plain": plain})
        await TaskStream(self, await wire.opened(comm, plain)).serve()

    def others_waiting(self, stream: TaskStream) -> bool:
        """Whether a stream other than ``stream`` has tasks waiting for a slot."""
        return any(other is not stream and other.has_queued() for other in self.streams)

    def result(self, key: str) -> dict:
        """A peer's or an engine's request for a result kept here: a small one as one
        pickle's bytes (Dask's comm carries bytes almost for free; its serializers cost
        each side about half a millisecond on a 10 kB batch, docs/benchmarks.md), a
        large one through Dask's serialization (its arrays in frames of their own, not
        copied). Read with `wire.answered_value`."""
        if key not in self.kept:
            return {"status": "missing"}
        value = self.kept[key]
        if sizeof(value) <= PICKLED_MAX_BYTES:
            with contextlib.suppress(Exception):  # what plain pickle refuses goes below
                return {"status": "OK", "pickled": pickle.dumps(value, protocol=5)}
        return {"status": "OK", "value": to_serialize(value)}

    async def fetch(self, kept: KeptInput) -> Any:
        """A kept result, from here or from the worker keeping it (bounded: a frozen
        peer accepts the connection and never answers)."""
        if kept.key in self.kept:
            return self.kept[kept.key]
        try:
            return await ask_peer_for(
                self.runtime.worker.rpc, kept.address, RESULT_HANDLER, kept.key
            )
        except InputLostError:
            raise InputGone(kept.key) from None

    def resolve_in_thread(self, obj):
        """:func:`resolve_kept` from a task's thread (the Dask route's)."""
        if not has_kept(obj):
            return obj
        return dask_compat.sync_on_loop(self.runtime.worker.loop, resolve_kept, self, obj)

    def detach(self, key: str) -> bool:
        """A running task was cancelled: its slot goes to the next task at once (it
        runs on to its end in its thread, ignored). Whether it was detached (not if
        it had ended, or lent its slot to wait)."""
        ctx = self.runtime.running.get(key)
        if ctx is None or ctx.route != "direct":
            return False
        with ctx.lock:
            if ctx.finished or ctx.lent or ctx.detached:
                return False
            ctx.detached = True
        self.slots.release()
        return True

    def close(self) -> None:
        """The worker closes (on its event loop): its engines see their streams end now
        (a stream taken over from Dask's comm is not among the comms Dask closes)."""
        for stream in list(self.streams):
            stream.stream.abort()
        self.pool.shutdown(wait=False)
        self.kept.clear()


class TaskRoute(WorkerPlugin):
    """Registered by an engine of the direct route: every worker, those that join
    later too, takes task streams."""

    name = "hrl-tasks-task-route"
    idempotent = True

    def setup(self, worker) -> None:
        from hrl_tasks.scheduler.runtime import WorkerRuntime

        install(WorkerRuntime.of(worker))


def install(runtime) -> TaskService:
    """The worker's task service, made on first use, and its handlers."""
    if runtime.task_service is None:
        runtime.task_service = service = TaskService(runtime)
        runtime.worker.handlers[TASKS_HANDLER] = service.serve_stream

        def result(comm=None, key=None):
            return service.result(key)

        runtime.worker.handlers[RESULT_HANDLER] = result

        def story(comm=None, keys=()):
            return service.story_of(keys)

        runtime.worker.handlers[STORY_HANDLER] = story
    return runtime.task_service
