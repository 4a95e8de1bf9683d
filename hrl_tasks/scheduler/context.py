"""What a running task knows about itself, and how it waits without deadlocking.

Every engine task runs with a :class:`TaskContext` (``hrl_tasks.task_context()``).
A task that waits for other tasks (nested tasks) wraps the wait in
:func:`task_wait`, which leaves the worker's thread pool for the wait.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass, field

from distributed import get_worker, rejoin, secede

from hrl_tasks.scheduler import dask_compat


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
    direct_call: bool = False  # a direct call, run outside Dask's task machinery
    route: str = "dask"  # "direct": a plain task sent straight to the worker (task_service)
    slots: object = field(default=None, repr=False)  # the worker's Slots, on the direct route
    lent: bool = False  # waiting: its slot is lent to other tasks
    on_wait: object = field(default=None, repr=False)  # told True/False as it waits/goes on
    elapsed: float | None = None  # a direct call's time, when its reply carries it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cancelled(self) -> bool:
        """Whether this attempt was cancelled (e.g. a backup copy won) while it runs.

        Dask cannot stop a running task, but a task that checks this between
        steps of its work can stop early and give its thread back. A direct
        call is never told: this is always False there.
        """
        if self.direct_call or self.topic == "inprocess":
            return False
        state = dask_compat.task_state(get_worker(), self.key)
        return state is None or state[0] in ("cancelled", "released", "forgotten")


class _Running:
    """Per-thread facts: the task context (a ContextVar) and whether a direct call runs."""

    task: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar(
        "hrl_tasks_current_task", default=None
    )
    direct_call = threading.local()
    waits = threading.local()  # .key: the task whose first wait already seceded


def current_task() -> TaskContext | None:
    """The context of the engine task running in this thread, or ``None``."""
    return _Running.task.get()


def enter_task(ctx: TaskContext):
    """Make ``ctx`` the current task; returns a token for :func:`leave_task`."""
    return _Running.task.set(ctx)


def leave_task(token) -> None:
    _Running.task.reset(token)


@contextlib.contextmanager
def direct_call_thread():
    """Mark the calling thread as running a direct call while the body runs."""
    _Running.direct_call.active = True
    try:
        yield
    finally:
        _Running.direct_call.active = False


def in_direct_call() -> bool:
    """Whether the calling thread runs a direct call of a stateful worker."""
    return getattr(_Running.direct_call, "active", False)


def in_task_thread() -> bool:
    """Whether the calling thread runs a task of a Dask worker's thread pool."""
    try:
        get_worker()
    except ValueError:
        return False
    return dask_compat.running_task_key() is not None


def worker_address() -> str | None:
    """The address of the worker process running the caller (a task or a direct
    call), or None outside the workers (the driver)."""
    try:
        return get_worker().address
    except ValueError:
        return None


def in_worker_task() -> bool:
    """Whether the calling thread runs an engine task or a direct call on a worker."""
    ctx = current_task()
    if ctx is not None and ctx.route == "direct":
        return True
    return in_task_thread() or in_direct_call()


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
    ctx = current_task()
    if ctx is not None and ctx.route == "direct":
        with _lent_slot(ctx):
            yield
        return
    key = dask_compat.running_task_key() if not in_direct_call() else None
    if key is None:
        yield
        return
    if ctx is not None:
        with ctx.lock:
            detached = ctx.detached
            ctx.left_pool = True
        if detached:  # cancelled and already out of the pool: nothing to give back
            yield
            return
    if getattr(_Running.waits, "key", None) != key:
        # First wait of this task: tell the worker (Dask allows one secede per task).
        _Running.waits.key = key
        if ctx is not None and ctx.resources:
            ctx.seceded = True
            lend_resources(ctx.resources, +1)
        secede()
    else:
        dask_compat.leave_pool_again()
    # The slot shared with the direct route is taken back after the pool thread: a task
    # holding its slot while waiting for a thread would block a thread waiting for a slot.
    shared = ctx is not None and ctx.slots is not None
    with _lent_slot(ctx) if shared else contextlib.nullcontext():
        try:
            yield
        finally:
            rejoin()


@contextlib.contextmanager
def _lent_slot(ctx: TaskContext):
    """A task of the direct route lends its worker slot while the body waits, and
    takes one back (ahead of tasks not started) before it goes on."""
    with ctx.lock:
        lend = not ctx.lent and not ctx.finished
        ctx.lent = ctx.lent or lend
    if not lend:  # already lent by an outer wait
        yield
        return
    if ctx.on_wait is not None:  # first: the slot it lends goes to someone who counts it
        try:
            ctx.on_wait(True)  # raises if too many wait on this worker already
        except BaseException:
            with ctx.lock:
                ctx.lent = False
            raise
    ctx.slots.lend()
    try:
        yield
    finally:
        ctx.slots.take_back()
        with ctx.lock:
            ctx.lent = False
        if ctx.on_wait is not None:
            ctx.on_wait(False)


def lend_resources(request: dict, sign: int) -> None:
    """Lend (+1) or take back (-1) resources on this worker, from any thread."""
    worker = get_worker()
    if threading.get_ident() == worker.thread_id:
        dask_compat.lend_resources(worker, request, sign)
    else:
        worker.loop.add_callback(dask_compat.lend_resources, worker, request, sign)
