"""The state machine's invariants, checked after every ``handle()`` when asked.

As distributed's ``Scheduler.validate_state``: cheap enough to run in tests and
in a CI pass over the engine's tests (``Engine(validate=True)`` or
``HRL_TASKS_VALIDATE=1``), too slow for every run. A violation raises
:class:`InvalidState` naming each broken rule, the task and what it holds, so
a bug that would hang a run fails where it happens instead.

The rules:

- every task not done is *somewhere*: an attempt of it is in flight, it waits
  out a retry's back-off, it waits for inputs that are themselves not done, it
  is queued on an object that has no home yet, or its call ran and waits for
  its object's creation report or for a snapshot that is in flight;
- every attempt belongs to a task not done, which knows it; an attempt bound
  to a worker (a stateful object's call) is bound to a live worker; an attempt
  of the direct route is counted on the live worker it was sent to, and every
  one counted there is in flight; a task waiting for a free slot is queued
  for one;
- the ledger adds up: every live object with a home holds its request there,
  on a live worker, and nothing else is held. (Not that a worker holds no
  more than it declares: what a worker declares is read as it advertises
  itself plus what the engines record they hold, and the two change one after
  the other, so a read may briefly find less than is held; never more.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hrl_tasks.scheduler.status import PENDING, STATUSES


class TaskView(Protocol):
    """What the rules read of a task (a ``state.Task``)."""

    task_id: str
    name: str
    obj_id: str | None
    status: str
    live: dict
    waiting_on: set
    retry_due: float | None
    room_wait: tuple | None


class StateView(Protocol):
    """What the rules read of the state (an ``state.EngineState``, which imports this
    module: the rules know its shape, not its module)."""

    now: float
    tasks: Mapping[str, TaskView]
    attempts: Mapping[str, Any]
    objects: Mapping[str, Any]
    ledger: Any
    nthreads: Mapping[str, int]
    sent: Mapping[str, set]
    sent_waiting: Mapping[str, set]
    load: Any
    room: Any
    unplaced: Mapping[str, None]
    waiters: Mapping[str, set]


class InvalidState(AssertionError):
    """The engine's state broke one of its invariants (a bug in the engine)."""


def problems(state: StateView) -> list[str]:
    """Every broken invariant of ``state``, one sentence each (empty: all hold)."""
    found: list[str] = []
    for task in state.tasks.values():
        found += _task_problems(state, task)
    found += _attempt_problems(state)
    found += _ledger_problems(state)
    return found


def check(state: StateView) -> None:
    """Raise :class:`InvalidState` if ``state`` breaks an invariant."""
    found = problems(state)
    if found:
        shown = "\n  ".join(found[:20])
        more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
        raise InvalidState(f"the engine's state is inconsistent:\n  {shown}{more}")


def _task_problems(state: StateView, task: TaskView) -> list[str]:
    if task.status not in STATUSES:
        return [f"task {task.task_id} has status {task.status!r}"]
    if task.status != PENDING:
        return [f"task {task.task_id} is {task.status} with attempts {sorted(task.live)}"] * bool(
            task.live
        )
    where = where_is(state, task)
    if not where:
        return [
            f"task {task.task_id} ({task.name}) is pending but nothing will end it: no "
            f"attempt in flight, no back-off, no inputs awaited, not queued on its object"
        ]
    return [f"task {task.task_id}: {w}" for w in where if w.startswith("!")]


def where_is(state: StateView, task: TaskView, now: float | None = None) -> list[str]:
    """Where a pending task is: reasons it will end (a '!' marks a reason that is broken).
    ``now``: the clock's time (default: that of the last event handled)."""
    now = state.now if now is None else now
    where = []
    for key in task.live:
        attempt = state.attempts.get(key)
        if attempt is None or attempt.task_id != task.task_id:
            where.append(f"! its attempt {key} is not an attempt of it")
        elif attempt.worker is None and attempt.sent_to is not None:  # the direct route
            where.append(
                f"attempt {key} sent to {attempt.sent_to} {now - task.live[key]:.1f} s "
                "ago (running or queued there: it reports no start)"
            )
        elif attempt.worker is None:
            where.append(f"attempt {key} sent {now - task.live[key]:.1f} s ago, not started")
        else:
            since = now - (attempt.started_at or now)
            where.append(f"attempt {key} running on {attempt.worker} for {since:.1f} s")
    if task.room_wait is not None:
        where.append(
            "waits for a free slot on a worker"
            if task.task_id in state.room
            else "! waits for a free slot but is not queued for one"
        )
    if task.retry_due is not None:
        where.append(f"waits out a retry's back-off ({task.retry_due - now:.1f} s left)")
    if task.waiting_on:
        for dep in task.waiting_on:
            found = state.tasks.get(dep)
            if found is None or found.status != PENDING:
                where.append(f"! it waits for input {dep}, which is done or unknown")
            elif task.task_id not in state.waiters.get(dep, ()):
                where.append(f"! it waits for input {dep}, which will not wake it")
            else:
                where.append(f"waits for input {dep} ({state.tasks[dep].name})")
    obj = state.objects.get(task.obj_id) if task.obj_id else None
    if obj is not None:
        if task.task_id in obj.queued:
            ok = obj.address is None and obj.gone is None
            where.append(
                f"queued until {obj.name!r} has a home"
                if ok
                else "! queued on an object that has a home or is gone"
            )
        if any(t is task for t, _, _ in obj.held):
            where.append("held for its object's creation report")
        if any(t == task.task_id for waiting in obj.snapshots.values() for t, _ in waiting):
            where.append("awaiting a snapshot")
    return where


def _attempt_problems(state: StateView) -> list[str]:
    found = []
    for key, attempt in state.attempts.items():
        task = state.tasks.get(attempt.task_id)
        if task is None or task.status != PENDING:
            found.append(f"attempt {key} of task {attempt.task_id}, which is done or unknown")
        elif key not in task.live:
            found.append(f"attempt {key} is not among the attempts of task {task.task_id}")
        if attempt.pinned is not None and attempt.pinned not in state.ledger.capacity:
            found.append(f"attempt {key} is bound to worker {attempt.pinned}, which is gone")
        if attempt.sent_to is not None and (
            attempt.sent_to not in state.nthreads or key not in state.sent.get(attempt.sent_to, ())
        ):
            found.append(f"attempt {key} was sent to {attempt.sent_to}, which does not count it")
    for worker, keys in state.sent.items():
        for key in keys - set(state.attempts):
            found.append(f"worker {worker} counts attempt {key}, which is not in flight")
    for worker, keys in state.sent_waiting.items():
        for key in keys - state.sent.get(worker, set()):
            found.append(f"attempt {key} waits on {worker} but was not sent there")
    counted = {
        w: (len(state.sent.get(w, ())) - len(state.sent_waiting.get(w, ())), n)
        for w, n in state.nthreads.items()
    }
    if state.load.counts() != counted:
        found.append(f"the workers' order by load counts {state.load.counts()}, not {counted}")
    return found


def _ledger_problems(state: StateView) -> list[str]:
    ledger = state.ledger
    found = ledger.problems()
    for holder, (worker, _) in ledger.holdings.items():
        obj = state.objects.get(holder)
        if obj is None or obj.address != worker:
            found.append(f"{holder} holds resources on {worker} but does not live there")
    for obj in state.objects.values():
        waits = obj.gone is None and obj.address is None and obj.unplaced_since is not None
        if waits and obj.obj_id not in state.unplaced:
            found.append(f"object {obj.obj_id} waits for room but is not among those waiting")
        if obj.address is not None and obj.gone is None:
            if obj.obj_id not in ledger.holdings:
                found.append(f"object {obj.obj_id} lives on {obj.address} but holds nothing")
            if obj.address not in ledger.capacity:
                found.append(f"object {obj.obj_id} lives on {obj.address}, which is gone")
    return found
