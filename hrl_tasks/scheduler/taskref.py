"""TaskRef: the future the engine hands out, and the supervision of its attempts.

A TaskRef stands for one logical task. Underneath it are one or more Dask
futures, one per attempt (a retry, or a backup copy of a straggler); each has
a fresh key. The TaskRef resolves when one attempt succeeds, or when the
retry policy gives up. ``ref.result()`` then fetches the value of the winning
attempt; passed to ``engine.submit`` a TaskRef becomes a dependency, so the
value moves worker to worker without passing through the driver.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import TYPE_CHECKING, Any

from hrl_tasks.scheduler.direct import Shared
from hrl_tasks.scheduler.worker_side import task_wait

if TYPE_CHECKING:
    from distributed import Future

    from hrl_tasks.scheduler.engine import Engine


class TaskRef:
    """A handle on a task submitted through the engine; an ordinary future.

    Example::

        ref = engine.submit(rollout, seed, name="rollout", retries=2)
        batch = ref.result(timeout=60)

    Attributes:
        name: the task name (statistics and the Dask dashboard group by it).
    """

    def __init__(self, engine: Engine, name: str, launch, deps: list[TaskRef]):
        self.engine = engine
        self.name = name
        self.deps = deps
        self._launch = launch  # attempt number -> (dask future, deps snapshot)
        self._outcome: cf.Future = cf.Future()
        self._lock = threading.RLock()
        self._future: Future | None = None
        self._live: dict[str, tuple[Future, int, dict]] = {}
        self.attempts = 0
        self.call_info = None  # (object record, seq) for a stateful-worker call
        self.policy = None  # RetryPolicy of a plain task
        self.call_args = (
            None  # (fn, args, kwargs, resources) of a task, (method, args, kwargs) of a call
        )
        self.speculation = None  # SpeculationPolicy when backups are allowed
        self.copies: dict[str, float] = {}  # key of each attempt -> when it was sent
        self.backups: set[str] = set()  # keys of backup copies
        self.linked: list[TaskRef] = []  # backup calls on peers of a stateful-worker group
        self.direct = False  # a direct call (scheduler/direct.py): its result lives in the driver

    # --- user API -----------------------------------------------------------

    @property
    def key(self) -> str | None:
        """The Dask key of the current (or winning) attempt."""
        future = self._future
        return None if future is None else future.key

    @property
    def future(self) -> Future | None:
        """The Dask future of the current (or winning) attempt."""
        return self._future

    def done(self) -> bool:
        """Whether the task has finished: succeeded, failed for good, or cancelled."""
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the task and return its value, or raise its final error.

        Args:
            timeout: seconds to wait; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: if it is not done within ``timeout``.
            Exception: what the task raised in its last attempt.
        """
        with task_wait():
            if self.call_info is None and not self._outcome.done():
                # Fast path: wait on the attempt itself, without waking the engine's
                # threads (each thread hop can cost a GIL switch interval).
                deadline = None if timeout is None else time.monotonic() + timeout
                try:
                    return self._future.result(timeout)
                except Exception:  # retried, cancelled for a backup, or failed for good
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._wait_outcome(timeout).result()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the task and return its final error, or ``None`` if it succeeded."""
        with task_wait():
            try:
                self._wait_outcome(timeout)
            except TimeoutError:
                raise
            except BaseException as exc:  # the task's own error
                return exc
            return None

    def cancel(self) -> bool:
        """Cancel the task. A running attempt runs to its end but its result is dropped.

        Returns:
            ``True`` if the task was not finished and is now cancelled.
        """
        with self._lock:
            if self._outcome.done():
                return False
            live = [f for f, _, _ in self._live.values()]
            self._live.clear()
            self._outcome.set_exception(cf.CancelledError(f"task {self.name!r} was cancelled"))
        self.engine._note_cancelled(self)
        if live:
            self.engine.cancel_futures(live)
        return True

    def add_done_callback(self, fn) -> None:
        """Call ``fn(ref)`` in a background thread once the task is done."""
        self._outcome.add_done_callback(lambda _: fn(self))

    def __repr__(self) -> str:
        state = "pending"
        if self._outcome.done():
            state = (
                "cancelled"
                if self._outcome.cancelled()
                else ("error" if self._outcome.exception() is not None else "finished")
            )
        return f"<TaskRef {self.name} key={self.key} {state}>"

    def __reduce__(self):
        raise TypeError(
            "a TaskRef cannot be pickled; pass it as an argument of engine.submit or "
            "handle.call (it becomes a dependency), or pass ref.result()"
        )

    # --- engine side ----------------------------------------------------------

    def _wait_outcome(self, timeout: float | None):
        try:
            return self._outcome.result(timeout)
        except cf.TimeoutError:
            raise TimeoutError(f"task {self.name!r} not done within {timeout} s") from None

    def _start_attempt(self, attempt: int, launched: tuple | None = None, backup=False) -> None:
        """Launch attempt number ``attempt`` (or adopt ``launched``) and watch it."""
        future, deps_used = launched or self._launch(attempt)
        with self._lock:
            if self._outcome.done():
                self.engine.cancel_futures([future])
                return
            self._live[future.key] = (future, attempt, deps_used)
            self.copies[future.key] = time.monotonic()
            if backup:
                self.backups.add(future.key)
            self._future = future
            self.attempts += 1
            self.engine._attempts[future.key] = self
        self.engine.watch(future)

    def _restart(self) -> None:
        """Drop the live attempts (their worker is gone) and launch a new one."""
        with self._lock:
            old = [f for f, _, _ in self._live.values()]
            self._live.clear()
        if old:
            self.engine.cancel_futures(old)
        self._start_attempt(self.attempts)

    def _start_backup(self, worker: str) -> None:
        """Launch a backup copy of this task on ``worker`` (speculation)."""
        fn, args, kwargs, request = self.call_args
        real_args, used = resolve_refs(args)
        real_kwargs, used_kw = resolve_refs(kwargs)
        with self._lock:  # a copy of the current attempt, not a retry: same number
            attempt = max((a for _, a, _ in self._live.values()), default=0)
        future = self.engine.run(
            fn, real_args, real_kwargs, name=self.name, attempt=attempt,
            resources=request, workers=[worker], priority=1,
        )  # fmt: skip
        self._start_attempt(attempt, (future, {**used, **used_kw}), backup=True)

    def _finish(self, future: Future, by_backup: bool = False) -> bool:
        """Resolve with a successful copy; the others are cancelled. False if already done."""
        with self._lock:
            if self._outcome.done():
                return False
            others = [f for k, (f, _, _) in self._live.items() if k != future.key]
            self._live.clear()
            self._future = future
            self._outcome.set_result(future)
        losers = [f.key for f in others]
        if others:
            self.engine.cancel_futures(others)
            if self.call_info is not None and not self.direct:  # it may never run: say so
                self.call_info[0].skip(self.call_info[1])
        for peer_call in self.linked:
            if peer_call.future is not future:
                losers.append(peer_call.key)
                peer_call.cancel()
        if self.speculation is not None:
            winner = next(iter(self.backups)) if by_backup else future.key
            self.engine.speculator.on_finished(self, winner, losers)
        return True

    def _fail(self, error: BaseException) -> bool:
        with self._lock:
            if self._outcome.done():
                return False
            live = [f for f, _, _ in self._live.values()]
            self._live.clear()
            self._outcome.set_exception(error)
        if live:
            self.engine.cancel_futures(live)
        return True


def collect_refs(obj, found: list) -> None:
    """Append every TaskRef inside ``obj`` (lists, tuples, sets, dicts) to ``found``."""
    if isinstance(obj, TaskRef):
        if obj not in found:
            found.append(obj)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            collect_refs(item, found)
    elif isinstance(obj, dict):
        for item in obj.values():
            collect_refs(item, found)


def resolve_refs(obj):
    """Replace TaskRefs by their current Dask futures, and `Shared` values by the values
    (a task carries them in its graph); returns (new obj, {id(ref): future})."""
    used: dict = {}

    def walk(item):
        if isinstance(item, Shared):
            return item.value
        if isinstance(item, TaskRef):
            if item.direct:
                raise TypeError(
                    f"{item.name!r} was a direct call: its result lives in the driver, not in "
                    "the cluster, so it cannot be a task's input; pass its .result() instead"
                )
            used[id(item)] = item._future
            return item._future
        if isinstance(item, (list, tuple, set, frozenset)):
            return type(item)(walk(x) for x in item)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(obj), used
