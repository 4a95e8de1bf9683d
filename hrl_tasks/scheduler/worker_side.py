"""What runs inside the worker processes.

Every engine task runs through :func:`run_task`, which gives the function its
:class:`TaskContext` (name, attempt, resources), times it, and makes blocking
waits inside it safe (see :func:`task_wait`). Stateful workers are plain
Python objects kept in a :class:`WorkerRuntime` attached to the Dask worker;
their methods are called through ordinary tasks pinned to that worker
(:func:`call_object`), so every call is a real future.

Ordering of calls to one object: the driver numbers the calls of a handle
(creation is 0); a call runs only after every lower number has finished,
failed or been cancelled, so ``set_weights`` followed by ``sample`` never runs
the other way round even when the first waits for its argument to arrive.
Calls run one at a time unless the object's class sets ``thread_safe = True``.

Direct calls (``handle.call(..., direct=True)``) skip the scheduler: the
driver sends them to the worker's ``hrl_tasks_direct_call`` handler
(:meth:`WorkerRuntime.direct_call`), which runs them in threads of the
object's own (not in Dask's pool) under the same numbering, and answers with
the result. A value shared by many direct calls (``engine.share``) arrives
with the first of them (:class:`SharedValue`) and is kept here; the other
workers' calls carry a :class:`SharedRef` and fetch it from this worker
(:meth:`WorkerRuntime.shared_value`), so it leaves the driver once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import contextvars
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from distributed import get_client, get_worker, rejoin, secede
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize
from distributed.threadpoolexecutor import secede as pool_secede
from distributed.worker import _worker_cvar

from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError

RUNTIME_NAME = "hrl-tasks-runtime"
FLUSH_INTERVAL_S = 0.05
DIRECT_HANDLER = "hrl_tasks_direct_call"
SHARED_HANDLER = "hrl_tasks_shared_value"
DIRECT_THREADS = 8  # per object: direct calls may arrive out of order and wait for their turn
SHARED_KEPT = 4  # shared values kept per worker process, the newest
SHARED_WAIT_S = 30.0  # a peer asking for a shared value waits this long for it to arrive
_DIRECT_THREAD = threading.local()


@dataclass(frozen=True)
class SharedValue:
    """A shared value in a direct call's arguments, sent with it; kept for the peers."""

    key: str
    value: Any


@dataclass(frozen=True)
class SharedRef:
    """A shared value in a direct call's arguments, to fetch from the worker ``holder``."""

    key: str
    holder: str


class InputLostError(Exception):
    """A direct call's shared input could not be fetched from the worker holding it."""


@dataclass
class TaskContext:
    """What a running task knows about itself: ``hrl_tasks.task_context()``.

    Attributes:
        key: the Dask key of this attempt.
        name: the task name given at submit (used for statistics).
        attempt: 0 for the first run, 1 for the first retry, ... (for reseeding).
        resources: the resources this task asked for.
        topic: where the task reports its timing (the submitting engine's topic).
    """

    key: str
    name: str
    attempt: int
    resources: dict
    topic: str
    seceded: bool = False  # lent its resources to the worker while waiting
    thread: threading.Thread | None = field(default=None, repr=False)
    detached: bool = False  # cancelled while running: its thread left the pool
    finished: bool = False
    left_pool: bool = False  # waited once: the thread already left the pool
    direct: bool = False  # a direct call, run outside Dask's task machinery
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cancelled(self) -> bool:
        """Whether this attempt was cancelled (e.g. a backup copy won) while it runs.

        Dask cannot stop a running task, but a task that checks this between
        steps of its work can stop early and give its thread back. A direct
        call is never told: this is always False there.
        """
        if self.direct:
            return False
        state = get_worker().state.tasks.get(self.key)
        return state is None or state.state in ("cancelled", "released", "forgotten")


_CURRENT_TASK: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar(
    "hrl_tasks_current_task", default=None
)


def current_task() -> TaskContext | None:
    """The context of the engine task running in this thread, or ``None``."""
    return _CURRENT_TASK.get()


def _context(spec: dict, direct: bool = False) -> TaskContext:
    return TaskContext(
        key=spec["key"],
        name=spec["name"],
        attempt=spec["attempt"],
        resources=spec["resources"],
        topic=spec["topic"],
        direct=direct,
    )


@contextlib.contextmanager
def _reported(runtime: WorkerRuntime, ctx: TaskContext):
    """Run the body as ``ctx``'s task: reported at its start and end, and findable
    by `current_task` and the runtime meanwhile."""
    runtime.report(ctx.topic, "start", ctx.key, ctx.name, None)
    token = _CURRENT_TASK.set(ctx)
    ctx.thread = threading.current_thread()
    runtime.running[ctx.key] = ctx
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        _CURRENT_TASK.reset(token)
        runtime.running.pop(ctx.key, None)
        runtime.report(ctx.topic, "end", ctx.key, ctx.name, elapsed)


def _call_with_faults(runtime: WorkerRuntime, spec: dict, fn, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``, with the faults injected into this worker (not internal work)."""
    faults = None if spec.get("internal") else runtime.faults
    if faults is None:
        return fn(*args, **kwargs)
    start = time.perf_counter()
    faults.maybe_fail(spec["name"])
    result = fn(*args, **kwargs)
    faults.maybe_slow_down(spec["name"], time.perf_counter() - start)
    return result


def run_task(fn, spec: dict, args: tuple, kwargs: dict) -> Any:
    """Run one attempt of an engine task on a worker, reporting its start and end."""
    runtime = WorkerRuntime.of(get_worker())
    ctx = _context(spec)
    with _reported(runtime, ctx):
        try:
            return _call_with_faults(runtime, spec, fn, args, kwargs)
        finally:
            with ctx.lock:
                ctx.finished = True
                if ctx.detached:  # a new thread took this one's place in the pool: end here
                    from distributed.threadpoolexecutor import thread_state as pool_state

                    pool_state.proceed = False
            if ctx.seceded and ctx.resources:
                runtime.adjust_available(ctx.resources, -1)


def run_direct(runtime: WorkerRuntime, spec: dict, call: tuple) -> Any:
    """Run a direct call (``call_object``'s arguments) in a thread of the object's own.

    ``get_worker()`` works there as in a task (Dask's actors set the same
    context variable around their calls).
    """
    _DIRECT_THREAD.active = True
    token = _worker_cvar.set(runtime.worker)
    ctx = _context(spec, direct=True)
    try:
        with _reported(runtime, ctx):
            return _call_with_faults(runtime, spec, call_object, call, {})
    finally:
        ctx.finished = True
        _worker_cvar.reset(token)


def in_direct_call() -> bool:
    """Whether the calling thread runs a direct call of a stateful worker."""
    return getattr(_DIRECT_THREAD, "active", False)


def in_worker_task() -> bool:
    """Whether the calling thread runs an engine task or a direct call on a worker."""
    return in_task_thread() or in_direct_call()


def worker_local(key: str, factory):
    """An object built once per worker process and shared by the tasks run there.

    For large read-only things every task needs, such as ES's noise table:
    ``table = worker_local("noise", lambda: make_table(seed))``. Outside a worker
    (the driver, or the in-process SyncEngine) the object is kept by the current
    engine instead.
    """
    if in_worker_task():
        runtime = WorkerRuntime.of(get_worker())
        store, lock = runtime.cache, runtime.cache_lock
    else:
        from hrl_tasks.scheduler.engine import current_engine

        engine = current_engine()
        store, lock = engine.local_cache, engine.local_cache_lock
    with lock:
        if key not in store:
            store[key] = factory()
        return store[key]


def in_task_thread() -> bool:
    """Whether the calling thread runs a task of a Dask worker's thread pool."""
    try:
        get_worker()
    except ValueError:
        return False
    from distributed.threadpoolexecutor import thread_state as pool_state
    from distributed.utils import thread_state

    return getattr(thread_state, "key", None) is not None and hasattr(pool_state, "executor")


@contextlib.contextmanager
def task_wait():
    """Wrap a blocking wait so that it cannot deadlock the worker.

    Inside a task, the thread leaves the worker's pool for the wait and comes
    back afterwards, so a tree of waiting parents deeper than the thread count
    still finishes. The first wait also lends the task's resources back to its
    worker until the task ends (Dask keeps a seceded task's resources held,
    distributed issue 6565): a parent never starves its own children. Outside
    a task this does nothing.
    """
    if not in_task_thread():
        yield
        return
    from distributed.utils import thread_state

    ctx = current_task()
    if ctx is not None:
        with ctx.lock:
            detached = ctx.detached
            ctx.left_pool = True
        if detached:  # cancelled and already out of the pool: nothing to give back
            yield
            return
    if getattr(thread_state, "hrl_seceded", None) != thread_state.key:
        # First wait of this task: tell the worker (Dask allows one secede per task).
        thread_state.hrl_seceded = thread_state.key
        if ctx is not None and ctx.resources:
            ctx.seceded = True
            WorkerRuntime.of(get_worker()).adjust_available(ctx.resources, +1)
        secede()
    else:
        pool_secede(adjust=True)
    try:
        yield
    finally:
        rejoin()


@dataclass
class ObjectEntry:
    """One stateful worker object living in this worker process."""

    obj_id: str
    obj: Any = None
    error: BaseException | None = None
    thread_safe: bool = False
    finished: set = field(default_factory=set)
    watermark: int = -1
    cond: threading.Condition = field(default_factory=threading.Condition)
    call_lock: threading.RLock = field(default_factory=threading.RLock)
    direct_pool: cf.ThreadPoolExecutor | None = None  # direct calls' threads, made on first use

    def direct_executor(self) -> cf.ThreadPoolExecutor:
        with self.cond:
            if self.direct_pool is None:
                self.direct_pool = cf.ThreadPoolExecutor(
                    DIRECT_THREADS, thread_name_prefix=f"hrl-direct-{self.obj_id}"
                )
            return self.direct_pool

    def close_direct(self) -> None:
        if self.direct_pool is not None:
            self.direct_pool.shutdown(wait=False)

    def mark_finished(self, seq: int) -> None:
        with self.cond:
            if seq <= self.watermark:
                return
            self.finished.add(seq)
            while self.watermark + 1 in self.finished:
                self.watermark += 1
                self.finished.discard(self.watermark)
            self.cond.notify_all()

    def wait_created(self) -> None:
        """Block until the factory has run (or failed)."""
        with self.cond:
            if self.obj is not None or self.error is not None:
                return
        with task_wait(), self.cond:
            self.cond.wait_for(lambda: self.obj is not None or self.error is not None)

    def wait_turn(self, seq: int) -> None:
        """Block until all calls numbered below ``seq`` have finished."""
        with self.cond:
            if self.watermark >= seq - 1:
                return
        with task_wait(), self.cond:
            self.cond.wait_for(lambda: self.watermark >= seq - 1)


class WorkerRuntime(WorkerPlugin):
    """The engine's state inside one worker process, attached lazily."""

    name = RUNTIME_NAME

    def __init__(self, worker):
        self.worker = worker
        self.objects: dict[str, ObjectEntry] = {}
        self.reports: dict[str, list] = {}
        self.reports_lock = threading.Lock()
        self.flushing = False
        self.engine = None
        self.faults = None  # a FaultInjector while tests or benchmarks inject faults
        self.cache: dict = {}  # worker_local() objects, one per key per worker process
        self.cache_lock = threading.Lock()
        self.running: dict[str, TaskContext] = {}  # engine tasks executing here, by key
        self.shared: OrderedDict[str, Any] = OrderedDict()  # shared values, the newest last
        self.shared_arrived: dict[str, asyncio.Event] = {}  # peers waiting for one
        worker.handlers[DIRECT_HANDLER] = self.direct_call
        worker.handlers[SHARED_HANDLER] = self.shared_value

    @classmethod
    def of(cls, worker) -> WorkerRuntime:
        runtime = worker.plugins.get(RUNTIME_NAME)
        if runtime is None:
            runtime = worker.plugins.setdefault(RUNTIME_NAME, cls(worker))
        return runtime

    def entry(self, obj_id: str) -> ObjectEntry:
        found = self.objects.get(obj_id)
        if found is None:
            found = self.objects.setdefault(obj_id, ObjectEntry(obj_id))
        return found

    def report(self, topic: str, kind: str, key: str, name: str, elapsed: float | None) -> None:
        """Queue a start or end event for the engine listening on ``topic``.

        Events travel in batches; each says how long ago it happened, so the
        engine can place it on its own clock whatever the workers' clocks say.
        """
        event = (kind, key, name, self.worker.address, elapsed, time.monotonic())
        with self.reports_lock:
            self.reports.setdefault(topic, []).append(event)
            start_flusher = not self.flushing
            self.flushing = True
        if start_flusher:
            self.worker.loop.add_callback(self._flush_later)

    async def _flush_later(self):
        await asyncio.sleep(FLUSH_INTERVAL_S)
        with self.reports_lock:
            reports, self.reports = self.reports, {}
            self.flushing = False
        now = time.monotonic()
        for topic, events in reports.items():
            self.worker.log_event(topic, [[*e[:5], now - e[5]] for e in events])

    async def direct_call(self, comm=None, spec=None, call=None) -> dict:
        """Handler of a direct call: ``call`` is ``call_object``'s arguments.

        Answers ``{"status": "OK", "result": ...}``, ``{"status": "error",
        "exception": ...}`` (what the method raised) or ``{"status":
        "input-lost", "key": ...}`` when a shared input cannot be fetched (the
        call did not run; the driver sends it again with the value).
        """
        obj_id, seq, method, args, kwargs = call
        try:
            args, kwargs = await self._resolve_shared((args, kwargs))
        except InputLostError as exc:
            return {"status": "input-lost", "key": str(exc)}
        entry = self.entry(obj_id)
        loop = asyncio.get_running_loop()
        call = (obj_id, seq, method, args, kwargs)
        try:
            result = await loop.run_in_executor(
                entry.direct_executor(), run_direct, self, spec, call
            )
        except Exception as exc:  # the method's error, for the caller
            return {"status": "error", "exception": to_serialize(exc)}
        return {"status": "OK", "result": to_serialize(result)}

    async def shared_value(self, comm=None, key=None) -> dict:
        """Handler: a peer's request for shared value ``key`` (waits for it to arrive)."""
        if key not in self.shared:
            arrived = self.shared_arrived.setdefault(key, asyncio.Event())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(arrived.wait(), SHARED_WAIT_S)
        if key not in self.shared:
            self.shared_arrived.pop(key, None)
            return {"status": "missing"}
        return {"status": "OK", "value": to_serialize(self.shared[key])}

    def _keep_shared(self, key: str, value: Any) -> None:
        self.shared[key] = value
        self.shared.move_to_end(key)
        while len(self.shared) > SHARED_KEPT:
            self.shared.popitem(last=False)
        arrived = self.shared_arrived.pop(key, None)
        if arrived is not None:
            arrived.set()

    async def _resolve_shared(self, obj):
        """``obj`` with shared values in place of SharedValue / SharedRef markers."""
        if isinstance(obj, SharedValue):
            self._keep_shared(obj.key, obj.value)
            return obj.value
        if isinstance(obj, SharedRef):
            return await self._fetch_shared(obj)
        if isinstance(obj, (list, tuple)):
            return type(obj)([await self._resolve_shared(x) for x in obj])
        if isinstance(obj, dict):
            return {k: await self._resolve_shared(v) for k, v in obj.items()}
        return obj

    async def _fetch_shared(self, ref: SharedRef) -> Any:
        if ref.key in self.shared:
            return self.shared[ref.key]
        try:
            response = await getattr(self.worker.rpc(ref.holder), SHARED_HANDLER)(key=ref.key)
        except OSError:
            raise InputLostError(ref.key) from None  # the holder is gone
        if response["status"] != "OK":
            raise InputLostError(ref.key)
        self._keep_shared(ref.key, response["value"])
        return response["value"]

    def transition(self, key, start, finish, **kwargs) -> None:
        """Worker-state hook: a running engine task that gets cancelled leaves the pool."""
        if start == "executing" and finish == "released" and key in self.running:
            self.worker.loop.add_callback(self.detach, key)

    def detach(self, key: str) -> None:
        """Give a cancelled, still running task's thread slot to the next task.

        Dask cannot stop a running task; a copy that lost to its backup (or any
        cancelled task) would hold its thread until it ends. Here it leaves the
        pool the way ``secede()`` does, from outside: the worker starts its next
        task on a new thread while the old one runs to its end and then exits.
        The task's resources stay held until it really ends. Runs on the
        worker's event loop, where the task's state cannot change under it.
        """
        from distributed.threadpoolexecutor import threads_lock
        from distributed.worker_state_machine import SecedeEvent

        ctx = self.running.get(key)
        state = self.worker.state.tasks.get(key)
        if ctx is None or state is None:
            return
        if state.state != "cancelled" or state.previous != "executing":
            return
        with threads_lock:
            executor = next(
                (
                    e
                    for e in self.worker.executors.values()
                    if ctx.thread in getattr(e, "_threads", ())
                ),
                None,
            )
            if executor is None or not hasattr(executor, "_rejoin_list"):
                return  # not in a pool that can replace its threads
            with ctx.lock:
                if ctx.finished or ctx.left_pool or ctx.detached:
                    return
                ctx.detached = True
            executor._threads.discard(ctx.thread)
            executor._adjust_thread_count()
        self.worker.handle_stimulus(
            SecedeEvent(key=key, compute_duration=0.0, stimulus_id=f"hrl-detach-{time.time()}")
        )

    def adjust_available(self, request: dict, sign: int) -> None:
        """Lend (+1) or take back (-1) resources on this worker, from any thread."""

        def adjust():
            available = self.worker.state.available_resources
            for name, amount in request.items():
                available[name] = available.get(name, 0.0) + sign * amount

        if threading.get_ident() == self.worker.thread_id:
            adjust()
        else:
            self.worker.loop.add_callback(adjust)

    def nested_engine(self):
        """The engine that tasks on this worker get from ``current_engine()``."""
        if self.engine is None:
            from hrl_tasks.scheduler.engine import Engine

            self.engine = Engine(get_client(), owns_client=False)
        return self.engine

    def teardown(self, worker):
        for entry in list(self.objects.values()):
            entry.close_direct()
            close = getattr(entry.obj, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    close()
        self.objects.clear()


# --- stateful worker objects -------------------------------------------------


def create_object(obj_id: str, seq: int, factory, args: tuple, kwargs: dict, state: Any):
    """Build the object as call number ``seq`` and restore ``state`` if given."""
    entry = WorkerRuntime.of(get_worker()).entry(obj_id)
    with entry.cond:
        entry.watermark = max(entry.watermark, seq - 1)
    try:
        obj = factory(*args, **kwargs)
        has_state = callable(getattr(obj, "get_state", None)) and callable(
            getattr(obj, "restore_state", None)
        )
        if has_state and state is not None:
            obj.restore_state(state)
        with entry.cond:
            entry.thread_safe = bool(getattr(obj, "thread_safe", False))
            entry.obj = obj
        return {"has_state": has_state, "thread_safe": entry.thread_safe}
    except BaseException as exc:
        with entry.cond:
            entry.error = exc
        raise
    finally:
        entry.mark_finished(seq)


def call_object(obj_id: str, seq: int, method: str, args: tuple, kwargs: dict):
    """Run ``obj.method(*args, **kwargs)`` as call number ``seq`` of the object."""
    entry = WorkerRuntime.of(get_worker()).entry(obj_id)
    try:
        entry.wait_created()
        if not entry.thread_safe:
            entry.wait_turn(seq)
        if entry.error is not None:
            raise ObjectStartError(f"stateful worker {obj_id} failed to start") from entry.error
        if entry.obj is None:
            raise WorkerLostError(
                f"stateful worker {obj_id} is not on {get_worker().address}: its process "
                "was restarted or the object was killed"
            )
        bound = getattr(entry.obj, method, None)
        if not callable(bound):
            public = sorted(m for m in dir(entry.obj) if not m.startswith("_"))
            raise AttributeError(
                f"{type(entry.obj).__name__} has no method {method!r}; it has: {', '.join(public)}"
            )
        lock = contextlib.nullcontext() if entry.thread_safe else entry.call_lock
        with lock:
            return bound(*args, **kwargs)
    finally:
        entry.mark_finished(seq)


def skip_calls(obj_id: str, seqs: list[int]) -> None:
    """Mark calls that will never run (cancelled, or their inputs failed) as finished."""
    entry = WorkerRuntime.of(get_worker()).objects.get(obj_id)
    if entry is not None:
        for seq in seqs:
            entry.mark_finished(seq)


def destroy_object(obj_id: str, seq: int) -> bool:
    """Drop the object after the calls before ``seq``, calling its ``close()`` if any."""
    runtime = WorkerRuntime.of(get_worker())
    entry = runtime.entry(obj_id)
    entry.wait_turn(seq)
    runtime.objects.pop(obj_id, None)
    entry.close_direct()
    close = getattr(entry.obj, "close", None)
    if callable(close):
        close()
    return entry.obj is not None


async def change_supply(delta: dict, dask_worker=None) -> dict:
    """Add ``delta`` to the resources this worker advertises (negative to hold them)."""
    totals = dict(dask_worker.state.total_resources)
    for name, amount in delta.items():
        totals[name] = totals.get(name, 0.0) + amount
    await dask_worker.set_resources(**totals)
    return totals


def schedule_unrunnable(worker: str, dask_scheduler=None) -> int:
    """After a worker's supply grew, start waiting tasks that now fit on it."""
    ws = dask_scheduler.workers.get(worker)
    if ws is None:
        return 0
    recs = dask_scheduler.bulk_schedule_unrunnable_after_adding_worker(ws)
    if recs:
        dask_scheduler.transitions(recs, stimulus_id=f"hrl-tasks-supply-{time.time()}")
    return len(recs)


def local_resources(dask_worker) -> dict:
    """The resources a worker has free right now (for ``engine.resources()``)."""
    return dict(dask_worker.state.available_resources)
