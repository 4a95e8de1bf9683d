"""Stateful objects living in a worker process, and the calls that reach them.

Ordering of calls to one object: the driver numbers the calls of a handle
(creation first); a call runs only after every lower number has finished,
failed or been skipped, so ``set_weights`` followed by ``sample`` never runs
the other way round even when the first waits for its argument to arrive.
Calls run one at a time unless the object's class sets ``thread_safe = True``.

Calls arrive as Dask tasks pinned to this worker (:func:`call_object` through
``run_task``) or as direct calls (:func:`run_call`, sent on an engine's task
stream, :mod:`~hrl_tasks.scheduler.task_service`), which run in threads of the
object's own under the same numbering and answer with the result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distributed import get_worker
from distributed.sizeof import sizeof

from hrl_tasks.scheduler import dask_compat, task_service
from hrl_tasks.scheduler.context import TaskContext, direct_call_thread, task_wait
from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.runtime import WorkerRuntime
from hrl_tasks.scheduler.shared import SHARED_HANDLER, InputLostError, resolve_shared, serve_shared

DIRECT_THREADS = 8  # per thread-safe object; calls to any other object run one at a time


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
    loop_waiters: list = field(default_factory=list)  # (condition, loop, future): see `until`
    turn_waiters: dict = field(default_factory=dict)  # seq -> [(loop, future)]: see `until_turn`

    def direct_executor(self) -> cf.ThreadPoolExecutor:
        """The object's direct-call threads, made once it is built: one when its calls
        run one at a time (a call takes a thread only once its turn has come, see
        `direct_call`), else ``DIRECT_THREADS``. A pool larger than the calls that can
        run at once still grows: a call handed over while the previous one's thread
        is not yet back to idle starts a new thread (Ape-X's workers went from 9 to
        15 threads over 30 minutes, each new thread's stack and allocator arena
        about 1 MB more)."""
        with self.cond:
            if self.direct_pool is None:
                threads = DIRECT_THREADS if self.thread_safe else 1
                self.direct_pool = cf.ThreadPoolExecutor(
                    threads, thread_name_prefix=f"hrl-direct-{self.obj_id}"
                )
            return self.direct_pool

    def close(self) -> None:
        """Stop the direct-call threads and call the object's ``close()``, if any."""
        if self.direct_pool is not None:
            self.direct_pool.shutdown(wait=False)
        close = getattr(self.obj, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()

    def mark_finished(self, seq: int) -> None:
        with self.cond:
            if seq <= self.watermark:
                return
            self.finished.add(seq)
            while self.watermark + 1 in self.finished:
                self.watermark += 1
                self.finished.discard(self.watermark)
                for loop, future in self.turn_waiters.pop(self.watermark + 1, ()):
                    if not future.done():  # else its call was abandoned
                        loop.call_soon_threadsafe(_resolve, future)
            self.cond.notify_all()
            self._wake_loop_waiters()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait on the event loop, holding no thread, until ``condition()`` (read under
        the entry's lock) holds; checked again each time a call finishes."""
        loop = asyncio.get_running_loop()
        with self.cond:
            if condition():
                return
            future = loop.create_future()
            self.loop_waiters.append((condition, loop, future))
        await future

    async def until_turn(self, seq: int) -> None:
        """Wait on the event loop, holding no thread, until every call numbered below
        ``seq`` has finished. Waiters are kept by the call they wait for, so a call's
        end wakes only the next one: with every waiter checked at each end, 5,000 calls
        in flight to one object cost 12.5 million checks in its thread."""
        loop = asyncio.get_running_loop()
        with self.cond:
            if self.watermark >= seq - 1:
                return
            future = loop.create_future()
            self.turn_waiters.setdefault(seq, []).append((loop, future))
        await future

    def _wake_loop_waiters(self) -> None:
        waiting = []
        for condition, loop, future in self.loop_waiters:
            if future.done():  # its call was abandoned (the connection closed)
                continue
            if condition():
                loop.call_soon_threadsafe(_resolve, future)
            else:
                waiting.append((condition, loop, future))
        self.loop_waiters = waiting

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


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def entry_of(obj_id: str, runtime: WorkerRuntime | None = None) -> ObjectEntry:
    runtime = runtime or WorkerRuntime.of()
    found = runtime.objects.get(obj_id)
    if found is None:
        found = runtime.objects.setdefault(obj_id, ObjectEntry(obj_id))
    return found


def install_handlers(runtime: WorkerRuntime) -> None:
    """Let this worker answer direct calls and peers' requests for shared values."""
    if runtime.handlers_installed:
        return
    runtime.handlers_installed = True
    handlers = runtime.worker.handlers

    async def shared(comm=None, key=None):
        return await serve_shared(runtime, key)

    handlers[SHARED_HANDLER] = shared
    task_service.install(runtime).run_call = run_call


def create_object(obj_id: str, seq: int, factory, args: tuple, kwargs: dict, state: Any):
    """Build the object as call number ``seq`` and restore ``state`` if given."""
    runtime = WorkerRuntime.of()
    install_handlers(runtime)
    entry = entry_of(obj_id, runtime)
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
    entry = entry_of(obj_id)
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
    entry = WorkerRuntime.of().objects.get(obj_id)
    if entry is not None:
        for seq in seqs:
            entry.mark_finished(seq)


def destroy_object(obj_id: str, seq: int) -> bool:
    """Drop the object after the calls before ``seq``, calling its ``close()`` if any."""
    runtime = WorkerRuntime.of()
    entry = entry_of(obj_id, runtime)
    entry.wait_turn(seq)
    runtime.objects.pop(obj_id, None)
    if runtime.task_service is not None:  # the answers kept for a lost relay go too
        runtime.task_service.forget_relayed(obj_id)
    entry.close()
    return entry.obj is not None


# --- direct calls --------------------------------------------------------------------


async def run_call(
    runtime: WorkerRuntime, spec: dict, call: tuple
) -> tuple[str, Any, float | None]:
    """Run a direct call once its object may take it: ``(status, value, elapsed)``,
    status ``"OK"`` (value: the result), ``"kept"`` (value: the result's size; the
    result stays in this worker, as the spec's ``keep`` asks), ``"error"`` (the
    method's error, or a `WorkerLostError` for a kept input lost with its worker:
    the call did not run) or ``"input-lost"`` (value: the key of a shared input
    that could not be fetched; the call did not run)."""
    obj_id, seq, method, args, kwargs = call
    service = runtime.task_service
    try:
        args, kwargs = await resolve_shared(runtime, (args, kwargs))
        if task_service.has_kept((args, kwargs)):  # a peer's kept results, fetched here
            args, kwargs = await task_service.resolve_kept(service, (args, kwargs))
    except InputLostError as exc:
        return "input-lost", str(exc), None
    except task_service.InputGone as exc:  # it will never run: the calls after it go on
        entry_of(obj_id, runtime).mark_finished(seq)
        lost = WorkerLostError(f"{spec['name']}: its input {exc} was lost with its worker")
        return "error", lost, None
    entry = entry_of(obj_id, runtime)
    # A call takes one of the object's threads only once it may run: waiting in a
    # thread, calls that arrived early could hold every thread while the call they
    # wait for queues behind them (calls travel on several connections, in any order).
    await entry.until(lambda: entry.obj is not None or entry.error is not None)
    if not entry.thread_safe:
        await entry.until_turn(seq)
    loop = asyncio.get_running_loop()
    call = (obj_id, seq, method, args, kwargs)
    try:
        ok, value, elapsed = await loop.run_in_executor(
            entry.direct_executor(), run_direct, runtime, spec, call
        )
    except Exception as exc:  # the object's threads are gone (it was destroyed)
        ok, value, elapsed = False, exc, None
    if ok and spec.get("keep"):
        service.kept[spec["key"]] = value
        return "kept", sizeof(value), elapsed
    return ("OK" if ok else "error"), value, elapsed


def run_direct(runtime: WorkerRuntime, spec: dict, call: tuple) -> tuple[bool, Any, float | None]:
    """Run a direct call in a thread of the object's own: ``(ok, result or error,
    elapsed)``, ``elapsed`` None unless the reply is to carry the call's time (see
    `WorkerRuntime.reported`).

    ``get_worker()`` works there as in a task (Dask's actors set the same
    context variable around their calls).
    """
    token = dask_compat.worker_context(runtime.worker)
    ctx = TaskContext(
        spec["key"], spec["name"], spec["attempt"], {}, spec["topic"], direct_call=True
    )
    try:
        with direct_call_thread(), runtime.reported(ctx, quiet=spec.get("quiet", False)):
            value = runtime.call_with_faults(spec, call_object, call, {})
        return True, value, ctx.elapsed
    except Exception as exc:  # the method's error, for the caller
        return False, exc, ctx.elapsed
    finally:
        ctx.finished = True
        dask_compat.reset_worker_context(token)
