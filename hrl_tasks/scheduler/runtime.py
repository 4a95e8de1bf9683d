"""The engine's state inside one worker process, and how tasks run there.

Every engine task runs through :func:`run_task`, which gives the function its
:class:`~hrl_tasks.scheduler.context.TaskContext`, times it and reports its
start and end to the engine that submitted it. Reports travel in batches
(every ``FLUSH_INTERVAL_S``) as Dask events on the engine's topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from typing import Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler.context import TaskContext, enter_task, leave_task, lend_resources
from hrl_tasks.scheduler.serialization import Sealed

RUNTIME_NAME = "hrl-tasks-runtime"
FLUSH_INTERVAL_S = 0.05
SHARED_KEPT = 4  # shared values kept per worker process, the newest
SHARED_DROPPED_REMEMBERED = 256  # keys of shared values let go, remembered per process
CANCELLED_EARLY_KEPT = 1024  # cancelled keys whose task had not begun, the newest (seconds' worth)


class WorkerRuntime(WorkerPlugin):
    """Attached lazily to a Dask worker: objects, reports, caches and injected faults."""

    name = RUNTIME_NAME

    def __init__(self, worker):
        self.worker = worker
        self.objects: dict[str, Any] = {}  # obj_id -> ObjectEntry (worker_objects.py)
        self.reports: dict[str, list] = {}
        self.reports_lock = threading.Lock()
        self.unsent_starts: dict[str, tuple] = {}  # direct calls' start reports not flushed yet
        self.flushing = False
        self.engine = None  # the engine of ``current_engine()`` in tasks here
        self.faults = None  # a FaultInjector while tests or benchmarks inject faults
        self.cache: dict = {}  # worker_local() objects, one per key per worker process
        self.cache_lock = threading.Lock()
        self.running: dict[str, TaskContext] = {}  # engine tasks executing here, by key
        # Dask-route keys cancelled while executing before their task was in ``running``
        # (between Dask's start of it and run_task's first line), the newest last.
        self.cancelled_early: OrderedDict[str, None] = OrderedDict()
        self.running_lock = threading.Lock()  # running's entries against cancelled_early
        self.shared: OrderedDict[str, Any] = OrderedDict()  # shared values, the newest last
        self.shared_arrived: dict[str, asyncio.Event] = {}  # peers waiting for one
        # Keys of shared values let go, the newest last: a peer asking for one is told
        # at once, not after waiting for it to arrive (the driver then sends it).
        self.shared_dropped: OrderedDict[str, None] = OrderedDict()
        self.handlers_installed = False
        self.task_service = None  # the direct route's (task_service.install)
        self.header_keys = dask_compat.pin_header_keys()  # messages leave no dead slots
        self.missing = dask_compat.missing_at_start()  # private parts of Dask gone, told once

    @classmethod
    def of(cls, worker=None) -> WorkerRuntime:
        worker = worker or get_worker()
        runtime = worker.plugins.get(RUNTIME_NAME)
        if runtime is None:
            runtime = worker.plugins.setdefault(RUNTIME_NAME, cls(worker))
        return runtime

    # --- reports to the engine ---------------------------------------------------

    def report(self, topic: str, kind: str, key: str, name: str, elapsed: float | None) -> None:
        """Queue a start or end event for the engine listening on ``topic``.

        Events travel in batches; each says how long ago it happened, so the
        engine can place it on its own clock whatever the workers' clocks say.
        """
        event = (kind, key, name, self.worker.address, elapsed, time.monotonic())
        with self.reports_lock:
            self.reports.setdefault(topic, []).append(event)
            if kind == "start" and key in self.running and self.running[key].direct_call:
                self.unsent_starts[key] = (topic, event)
            start_flusher = not self.flushing
            self.flushing = True
        if start_flusher:
            self.worker.loop.add_callback(self._flush_later)

    def withdraw_start(self, key: str) -> bool:
        """Take back a direct call's start report if it has not left yet: the call's
        reply then carries its time instead (one message fewer per short call)."""
        with self.reports_lock:
            unsent = self.unsent_starts.pop(key, None)
            if unsent is None:
                return False
            topic, event = unsent
            self.reports[topic].remove(event)
            return True

    async def _flush_later(self):
        await asyncio.sleep(FLUSH_INTERVAL_S)
        with self.reports_lock:
            reports, self.reports = self.reports, {}
            self.unsent_starts.clear()
            self.flushing = False
            reports = {topic: events for topic, events in reports.items() if events}
        now = time.monotonic()
        for topic, events in reports.items():
            self.worker.log_event(topic, [[*e[:5], now - e[5]] for e in events])

    @contextlib.contextmanager
    def reported(self, ctx: TaskContext, quiet: bool = False):
        """Run the body as ``ctx``'s task: reported at its start and end, and findable
        by ``current_task()`` and by this runtime meanwhile.

        A direct call reports nothing when ``quiet`` (its driver does not need its
        start), or keeps both reports back when it ends before its start report left;
        either way its time is left in ``ctx.elapsed`` for its reply to carry.
        """
        token = enter_task(ctx)
        if self.running.get(ctx.key) is not ctx:
            self.track(ctx)
        if not quiet:
            self.report(ctx.topic, "start", ctx.key, ctx.name, None)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            leave_task(token)
            self.running.pop(ctx.key, None)
            if quiet or (ctx.direct_call and self.withdraw_start(ctx.key)):
                ctx.elapsed = elapsed
            else:
                self.report(ctx.topic, "end", ctx.key, ctx.name, elapsed)

    def call_with_faults(self, spec: dict, fn, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)``, with the faults injected into this worker (not internal work)."""
        faults = None if spec.get("internal") else self.faults
        if faults is None:
            return fn(*args, **kwargs)
        start = time.perf_counter()
        faults.maybe_fail(spec["name"])
        result = fn(*args, **kwargs)
        faults.maybe_slow_down(spec["name"], time.perf_counter() - start)
        return result

    # --- shared values (direct calls) ---------------------------------------------

    def keep_shared(self, key: str, value: Any) -> None:
        self.shared[key] = value
        self.shared.move_to_end(key)
        while len(self.shared) > SHARED_KEPT:
            dropped, _ = self.shared.popitem(last=False)
            self.shared_dropped[dropped] = None
        while len(self.shared_dropped) > SHARED_DROPPED_REMEMBERED:
            self.shared_dropped.popitem(last=False)
        arrived = self.shared_arrived.pop(key, None)
        if arrived is not None:
            arrived.set()

    # --- cancelled tasks leave the pool --------------------------------------------

    def transition(self, key, start, finish, **kwargs) -> None:
        """Worker-state hook: a running engine task that gets cancelled leaves the pool.

        Dask counts a task as executing from before :func:`run_task` begins; a
        cancel in between is remembered, and the task detaches once it is tracked.
        """
        if start != "executing" or finish != "released":
            return
        with self.running_lock:
            if key not in self.running:
                self.cancelled_early[key] = None
                while len(self.cancelled_early) > CANCELLED_EARLY_KEPT:
                    self.cancelled_early.popitem(last=False)
                return
        self.worker.loop.add_callback(self.detach, key)

    def track(self, ctx: TaskContext) -> None:
        """``ctx``'s task is findable here from now on (its cancel detaches it);
        :meth:`reported` lets it go."""
        ctx.thread = threading.current_thread()
        with self.running_lock:
            self.running[ctx.key] = ctx
            cancelled = self.cancelled_early.pop(ctx.key, False) is None
        if cancelled:
            self.worker.loop.add_callback(self.detach, ctx.key)

    def detach(self, key: str) -> None:
        """Give a cancelled, still running task's thread slot to the next task.

        Dask cannot stop a running task; a copy that lost to its backup (or any
        cancelled task) would hold its thread until it ends. Here it leaves the
        pool the way ``secede()`` does, from outside: the worker starts its next
        task on a new thread while the old one runs to its end and then exits.
        The task's resources stay held until it really ends. Runs on the
        worker's event loop, where the task's state cannot change under it.
        """
        ctx = self.running.get(key)
        if ctx is None or dask_compat.task_state(self.worker, key) != ("cancelled", "executing"):
            return

        held = []

        def claim() -> bool:
            with ctx.lock:
                if ctx.finished or ctx.left_pool or ctx.detached:
                    return False
                ctx.detached = True
                held.append(ctx.slots is not None and not ctx.lent)
                return True

        if dask_compat.detach_thread(self.worker, ctx.thread, claim):
            dask_compat.report_seceded(self.worker, key)
            if held and held[0]:  # its slot, shared with the direct route, goes too
                ctx.slots.release()

    def teardown(self, worker):
        if self.task_service is not None:
            self.task_service.close()
        for entry in list(self.objects.values()):
            entry.close()
        self.objects.clear()
        if self.engine is not None:  # before the worker's client closes: its topics go first,
            self.engine.close()  # or the scheduler logs each closed subscriber as CRITICAL


class DeclareThreads(WorkerPlugin):
    """A worker that started without ``CPU`` among its resources (a gateway's, whose
    start options may not reach ``--resources``) declares ``CPU`` = its threads, as
    the embedded cluster's workers do, so that the ledger and ``tune`` count its slots;
    then it tells the engines to look at it again."""

    name = "hrl-tasks-declare-threads"
    idempotent = True

    async def setup(self, worker) -> None:
        from hrl_tasks.scheduler import worker_events

        if "CPU" in worker.state.total_resources:
            return
        await dask_compat.change_supply(worker, {"CPU": float(worker.state.nthreads)})
        worker.log_event(
            worker_events.TOPIC,
            {"action": "add-worker", "worker": worker.address, "expected": False},
        )


def working(worker) -> bool:
    """Whether ``worker`` works for an engine now: it runs or has queued engine tasks,
    hosts a stateful worker, or keeps a direct-route result or put value. Retiring it
    would cost that work (see `downscaling`)."""
    runtime = worker.plugins.get(RUNTIME_NAME)
    if runtime is None:
        return False
    if runtime.running or runtime.objects:
        return True
    service = runtime.task_service
    return service is not None and bool(
        service.kept or any(stream.has_queued() for stream in list(service.streams))
    )


def run_task(fn, spec: dict, args: tuple, kwargs: dict) -> Any:
    """Run one attempt of an engine task on a worker, reporting its start and end.

    Where the direct route runs too, the task first takes one of the worker's
    slots, which both routes share (`task_service.Slots`); internal work does not.
    """
    if isinstance(fn, Sealed):
        fn, args, kwargs = fn.open()
    runtime = WorkerRuntime.of()
    ctx = TaskContext(spec["key"], spec["name"], spec["attempt"], spec["resources"], spec["topic"])
    service = runtime.task_service
    runtime.track(ctx)  # before its inputs and slot: a cancel while it waits for them detaches it
    try:
        if service is not None and not spec.get("internal"):
            args, kwargs = service.resolve_in_thread((args, kwargs))
            service.slots.acquire()
            with ctx.lock:
                if ctx.detached:  # cancelled while it waited: it does not run at all
                    service.slots.release()
                    return None
                ctx.slots = service.slots
        with runtime.reported(ctx):
            return runtime.call_with_faults(spec, fn, args, kwargs)
    finally:
        runtime.running.pop(ctx.key, None)
        with ctx.lock:
            ctx.finished = True
            holds_slot = ctx.slots is not None and not ctx.lent and not ctx.detached
            if ctx.detached:  # a new thread took this one's place in the pool: end here
                dask_compat.end_thread_after_task()
        if holds_slot:
            ctx.slots.release()
        if ctx.seceded and ctx.resources:
            lend_resources(ctx.resources, -1)


async def change_supply(delta: dict, dask_worker=None) -> dict:
    """Add ``delta`` to the resources this worker advertises (negative to hold them)."""
    return await dask_compat.change_supply(dask_worker, delta)


def schedule_unrunnable(worker: str, dask_scheduler=None) -> int:
    """After a worker's supply grew, start waiting tasks that now fit on it."""
    return dask_compat.schedule_unrunnable(dask_scheduler, worker)


def workers_and_holdings(path: list, dask_scheduler=None) -> tuple[dict, dict]:
    """The workers and what engines hold on them, read at once (see `dask_compat`)."""
    return dask_compat.workers_and_holdings(dask_scheduler, path)


def local_resources(dask_worker) -> dict:
    """The resources a worker has free right now (for ``engine.resources()``)."""
    return dask_compat.free_resources(dask_worker)
