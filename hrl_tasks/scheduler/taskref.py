"""TaskRef: the future the engine hands out.

A TaskRef is a task id plus a ``concurrent.futures.Future`` (its outcome) that
the engine's backend resolves. The state machine decides when: once one
attempt succeeded (a retry or a backup copy may be the one), or when the task
failed for good. The outcome's value says where the result is: a Dask future
(the value stays in the cluster, so a TaskRef passed to ``engine.submit``
becomes a dependency that moves worker to worker) or, for direct calls and
the in-process engine, the value itself.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol


class TaskOwner(Protocol):
    """What a TaskRef asks of the engine that made it (the engine is one; this module
    imports none, so that the engine may import it)."""

    def task_info(self, task_id: str, field: str) -> Any: ...

    def future_of(self, ref: TaskRef) -> Any: ...

    def gather(self, refs: Iterable[TaskRef], timeout: float | None = None) -> list: ...

    def wait(self, refs: Iterable[TaskRef], timeout: float | None = None) -> Any: ...

    def cancel(self, ref: TaskRef) -> None: ...

    def released(self, task_id: str) -> None: ...


@dataclass(frozen=True)
class Local:
    """A result that lives in this process (a direct call's, or the in-process engine's)."""

    value: Any


class Kept:
    """A result of the direct route kept on the worker that computed it (a large one).

    The worker keeps it while this object lives: when it is collected, the engine
    tells the worker to let it go (``release``, called with the key).
    """

    __slots__ = ("address", "key", "nbytes", "__weakref__")

    def __init__(self, address: str, key: str, nbytes: int):
        self.address, self.key, self.nbytes = address, key, nbytes

    def __repr__(self) -> str:
        return f"Kept({self.key!r} on {self.address}, {self.nbytes} bytes)"


class TaskRef:
    """A handle on a task submitted through the engine; an ordinary future.

    Example::

        ref = engine.submit(rollout, seed, name="rollout", retries=2)
        batch = ref.result(timeout=60)

    Attributes:
        name: the task name (statistics and the Dask dashboard group by it).
        task_id: the engine's id of the task (its first attempt's key).
        direct_call: a direct call: its result lives in the driver.
        pinned: a call of a stateful worker (its attempts run where the object lives).
        route: a plain task's route, ``"direct"`` or ``"dask"`` (None for calls).
        deps: the task ids of the tasks whose results it takes as inputs.
        recipe: a plain task's function, arguments and topic, to run it again if its
            result is lost before it is read (None for stateful-worker calls).
        forgotten_at_end: a stateful worker's creation or destruction, which the engine
            forgets once it ended: dropping its ref tells the engine nothing.
    """

    __slots__ = (
        "engine",
        "task_id",
        "name",
        "direct_call",
        "pinned",
        "route",
        "outcome",
        "deps",
        "recipe",
        "forgotten_at_end",
        "__weakref__",
    )

    def __init__(
        self,
        engine: TaskOwner,
        task_id: str,
        name: str,
        direct_call: bool = False,
        pinned: bool = False,
    ):
        self.engine = engine
        self.task_id = task_id
        self.name = name
        self.direct_call = direct_call
        self.pinned = pinned or direct_call
        self.route: str | None = None
        self.outcome: cf.Future = cf.Future()
        self.deps: tuple[str, ...] = ()
        self.recipe: tuple | None = None  # a plain task's (fn, args, kwargs, topic)
        self.forgotten_at_end = False

    @property
    def key(self) -> str:
        """The key of the current (or winning) attempt."""
        return self.engine.task_info(self.task_id, "current") or self.task_id

    @property
    def attempts(self) -> int:
        """Attempts launched so far (retries and backups included)."""
        return self.engine.task_info(self.task_id, "attempts") or 0

    @property
    def backups(self) -> set:
        """Keys of the backup copies launched for this task."""
        return set(self.engine.task_info(self.task_id, "backups") or ())

    @property
    def future(self):
        """The Dask future of the current (or winning) attempt, if it runs in the cluster."""
        return self.engine.future_of(self)

    def done(self) -> bool:
        """Whether the task has finished: succeeded, failed for good, or cancelled."""
        return self.outcome.done()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the task and return its value, or raise its final error.

        Args:
            timeout: seconds to wait; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: if it is not done within ``timeout``.
            Exception: what the task raised in its last attempt.
        """
        return self.engine.gather([self], timeout=timeout)[0]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the task and return its final error, or ``None`` if it succeeded."""
        self.engine.wait([self], timeout=timeout)
        if not self.outcome.done():
            raise TimeoutError(f"task {self.name!r} not done within {timeout} s")
        return self.outcome.exception()

    def cancel(self) -> bool:
        """Cancel the task. A running attempt runs to its end but its result is dropped.

        Returns:
            ``True`` if the task was not finished and is now cancelled.
        """
        if self.outcome.done():
            return False
        self.engine.cancel(self)
        return True

    def add_done_callback(self, fn) -> None:
        """Call ``fn(ref)`` once the task is done (in the thread that settles it:
        keep ``fn`` short and do not wait in it)."""
        self.outcome.add_done_callback(lambda _: fn(self))

    def __repr__(self) -> str:
        state = "pending"
        if self.outcome.done():
            state = "error" if self.outcome.exception() is not None else "finished"
        return f"<TaskRef {self.name} key={self.key} {state}>"

    def __reduce__(self):
        raise TypeError(
            "a TaskRef cannot be pickled; pass it as an argument of engine.submit or "
            "handle.call (it becomes a dependency), or pass ref.result()"
        )

    def __del__(self):
        # Not contextlib.suppress: this runs for every ref, and at interpreter shutdown.
        if self.forgotten_at_end:
            return
        try:  # noqa: SIM105
            self.engine.released(self.task_id)
        except Exception:
            pass


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
