"""Watching each attempt of a task and deciding what follows it.

Completions are watched in batches on the client's event loop; a success is
settled right there (no I/O, no hop to another thread: each hop can cost a GIL
switch interval), everything else on one settling thread, which may ask the
scheduler for the error. A failed attempt goes through the pure rules of
:mod:`~hrl_tasks.scheduler.retry`; a stateful-worker call goes to its object's
record instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import threading

from distributed import Future
from distributed.scheduler import KilledWorker

from hrl_tasks.scheduler import retry as retry_rules
from hrl_tasks.scheduler.errors import EngineError, WorkerLostError
from hrl_tasks.scheduler.taskref import TaskRef

logger = logging.getLogger(__name__)


class AttemptSupervision:
    """The part of :class:`~hrl_tasks.scheduler.engine.Engine` that settles attempts.

    Expects ``client``, ``_attempts``, ``_watch_lock``, ``_to_watch``,
    ``_settled`` and ``_count`` on the engine.
    """

    def watch(self, future: Future) -> None:
        """Have :meth:`_on_attempt_done` called once ``future`` finishes."""
        with self._watch_lock:
            self._to_watch.append(future)
            if len(self._to_watch) > 1:
                return  # a drain is already scheduled on the event loop
        self.client.loop.add_callback(self._drain_watch)

    def _drain_watch(self) -> None:
        with self._watch_lock:
            batch, self._to_watch = self._to_watch, []
        for future in batch:
            asyncio.ensure_future(self._await_done(future))

    async def _await_done(self, future: Future) -> None:
        try:
            await future._state.wait()
        finally:
            ref = self._attempts.get(future.key)
            if future.status == "finished" and ref is not None and ref.call_info is None:
                self._on_attempt_done(future)  # quick: no I/O, no hop to another thread
            else:
                self._settled.put(future)

    def _settle_loop(self) -> None:
        while (future := self._settled.get()) is not None:
            self._on_attempt_done(future)

    def _on_attempt_done(self, future: Future) -> None:
        try:
            self._settle_attempt(future)
        except Exception:  # never lose a task silently: fail it with the bug
            logger.exception("hrl_tasks: error while settling %s", future.key)
            ref = self._attempts.pop(future.key, None)
            if ref is not None:
                ref._fail(EngineError(f"internal error settling {future.key}; see the log"))

    def _settle_attempt(self, future: Future) -> None:
        ref = self._attempts.pop(future.key, None)
        if ref is None:
            return
        with ref._lock:
            entry = ref._live.pop(future.key, None)
            others_live = bool(ref._live)
        if entry is None or ref.done():
            return
        _, attempt, deps_used = entry
        if future.status == "finished":
            if ref.call_info is not None:
                ref.call_info[0].call_succeeded(ref, future)
            elif ref._finish(future):
                self._count("finished")
        elif future.status == "cancelled":
            if not others_live and ref._fail(cf.CancelledError(f"task {ref.name!r} was cancelled")):
                self._count("cancelled")
        elif not others_live:
            self._attempt_failed(ref, attempt, future.exception(), deps_used)

    def _attempt_failed(self, ref: TaskRef, attempt: int, error: BaseException, deps_used) -> None:
        stale = [d for d in ref.deps if not d.done() or deps_used.get(id(d)) is not d._future]
        if not stale:
            self._inputs_settled(ref, attempt, error, rerun=False)
            return
        # An input was being retried when this attempt started: wait for it,
        # then run again on its new value (not counted as a retry).
        remaining = [len(stale)]
        lock = threading.Lock()

        def input_done(_):
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            self._inputs_settled(ref, attempt, error, rerun=True)

        for dep in stale:
            dep.add_done_callback(input_done)

    def _inputs_settled(self, ref: TaskRef, attempt: int, error: BaseException, rerun: bool):
        failed_inputs = [d for d in ref.deps if d.exception(timeout=0) is not None]
        if failed_inputs:
            if ref._fail(failed_inputs[0].exception(timeout=0)):
                self._count("failed")
            if ref.call_info is not None:
                ref.call_info[0].skip(ref.call_info[1])
        elif rerun:
            ref._start_attempt(attempt)
        elif ref.call_info is not None:
            ref.call_info[0].call_failed(ref, error)
        else:
            self._apply_retry_policy(ref, attempt, error)

    def _apply_retry_policy(self, ref: TaskRef, attempt: int, error: BaseException) -> None:
        lost = isinstance(error, (KilledWorker, WorkerLostError))
        decision = retry_rules.decide(ref.policy, attempt, error, worker_lost=lost)
        if isinstance(decision, retry_rules.GiveUp):
            if lost:
                error = WorkerLostError(
                    f"task {ref.name!r} lost its worker and has no retries left "
                    f"({ref.attempts} attempts): {error}"
                )
            if ref._fail(error):
                self._count("failed")
            return
        self._count("retried")
        if decision.delay > 0:
            timer = threading.Timer(decision.delay, ref._start_attempt, (decision.attempt,))
            timer.daemon = True
            timer.start()
        else:
            ref._start_attempt(decision.attempt)
