"""What every backend keeps beside the state machine: the values it cannot hold.

The state machine knows tasks by id and attempts by key; the functions, their
arguments, the futures handed out and the results in flight live here, one
record per task (:class:`TaskRecord`) and per stateful object
(:class:`ObjectRecord`). The engine adds to them through :meth:`BackendRecords.add_task`
and :meth:`BackendRecords.add_object`; nothing else writes them but the backend.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class TaskRecord:
    """What the driver holds of one task until it settles: its ref's outcome, how to
    run it (``(fn or method, args, kwargs, topic)``; None for a creation, a kill or a
    put) and, for a direct call, whether its result stays on the worker (``keep``)
    and whether it may go through a host-mate's relay (``relay``, `relay`), and the
    TaskRefs among its arguments (``inputs``: direct calls it waits for)."""

    outcome: cf.Future
    payload: tuple | None = None
    keep: bool = False
    relay: bool = False
    inputs: tuple = ()


@dataclass(slots=True)
class ObjectRecord:
    """What the driver holds of one stateful object while it may be made again: how to
    make it (``(factory, args, kwargs, topic)``) and its current creation's outcome."""

    recipe: tuple
    creation: cf.Future | None = None


@dataclass(slots=True)
class InFlight:
    """One attempt the backend launched, in the one table of them (by key).

    ``route``: ``"dask"`` (a Dask task), ``"stream"`` (a plain task on an engine's
    stream to the worker at ``address``), ``"call"`` (a direct call there) or
    ``"local"`` (run in this process). ``value``: what holds its result (a Dask
    future, a ``Local`` value, a ``Kept`` one; None until it finished), while
    ``holds`` (until the state forgets or cancels the attempt). ``sent``: while the
    worker's answer is awaited on a stream, what was sent (a task's name; a direct
    call's ``(launch, spec, call, values)``), else None. The entry goes when it
    neither holds nor awaits.
    """

    route: str
    address: str | None = None
    value: Any = None
    sent: Any = None
    holds: bool = True


class BackendRecords:
    """Per task id its record, per object id its record; per key its attempt in flight.

    User threads add a task's record before they hand its event to the state
    machine; the backend reads and removes records as instructions say.
    """

    def __init__(self):
        self.tasks: dict[str, TaskRecord] = {}  # task id -> its record, until settled
        self.objects: dict[str, ObjectRecord] = {}  # obj id -> its record, until dropped
        self.in_flight: dict[str, InFlight] = {}  # key -> the attempt (see InFlight)
        self.released_ids: deque = deque()  # refs dropped by their holders, for the next event

    # --- tasks --------------------------------------------------------------------

    def add_task(
        self,
        task_id: str,
        outcome: cf.Future,
        payload: tuple | None = None,
        keep: bool = False,
        relay: bool = False,
        inputs: tuple = (),
    ) -> None:
        """Task ``task_id``: ``outcome`` settles when it does (see :class:`TaskRecord`)."""
        self.tasks[task_id] = TaskRecord(outcome, payload, keep, relay, inputs)

    def task_of(self, task_id: str) -> TaskRecord | None:
        """The record of an unsettled task, or None."""
        return self.tasks.get(task_id)

    def settle(self, task_id: str, value=None, error: BaseException | None = None) -> None:
        """Resolve task ``task_id``'s outcome with ``value`` or ``error`` (once)."""
        record = self.tasks.pop(task_id, None)
        if record is None or record.outcome.done():
            return
        if error is None:
            record.outcome.set_result(value)
        else:
            record.outcome.set_exception(error)

    # --- stateful objects -----------------------------------------------------------

    def add_object(self, obj_id: str, recipe: tuple, creation: cf.Future) -> None:
        """Object ``obj_id``, made by ``recipe``; ``creation`` settles when it is built."""
        self.objects[obj_id] = ObjectRecord(recipe, creation)

    def recipe_of(self, obj_id: str) -> tuple:
        """``(factory, args, kwargs, topic)`` of a known object (KeyError otherwise)."""
        return self.objects[obj_id].recipe

    def rebuild_with(self, obj_id: str, kwargs: dict) -> None:
        """Merge ``kwargs`` into the factory arguments of its next creation (an object
        ended for good is never made again: nothing to merge into)."""
        record = self.objects.get(obj_id)
        if record is not None:
            factory, args, before, topic = record.recipe
            record.recipe = (factory, args, {**before, **kwargs}, topic)

    def creation_of(self, obj_id: str) -> cf.Future | None:
        """The outcome of the object's latest creation, or None (not known, or dropped)."""
        record = self.objects.get(obj_id)
        return None if record is None else record.creation

    def creating(self, obj_id: str, task_id: str) -> None:
        """Creation task ``task_id`` builds the object now (again, after its worker
        died: such a creation has no ref, so its outcome is made here)."""
        task = self.tasks.get(task_id)
        if task is None:
            task = self.tasks[task_id] = TaskRecord(cf.Future())
        record = self.objects.get(obj_id)
        if record is not None:
            record.creation = task.outcome

    def drop_object(self, obj_id: str) -> None:
        self.objects.pop(obj_id, None)

    # --- attempts in flight -----------------------------------------------------------

    def track(self, key: str, route: str, address: str | None = None, value=None, sent=None):
        """Attempt ``key`` was launched by ``route`` (see :class:`InFlight`)."""
        self.in_flight[key] = InFlight(route, address, value, sent)

    def result_of(self, key: str | None):
        """What holds attempt ``key``'s result (None: unknown, forgotten, not finished)."""
        entry = self.in_flight.get(key)
        return None if entry is None or not entry.holds else entry.value

    def finished(self, key: str, value) -> None:
        """Attempt ``key``'s result is held by ``value`` now (unless it was forgotten)."""
        entry = self.in_flight.get(key)
        if entry is not None and entry.holds:
            entry.value = value

    def forget(self, key: str):
        """The state forgot or cancelled attempt ``key``: what held its result, if any."""
        entry = self.in_flight.get(key)
        if entry is None or not entry.holds:
            return None
        value, entry.value, entry.holds = entry.value, None, False
        if entry.sent is None:
            del self.in_flight[key]
        return value

    def sent_on(self, key: str, route: str, address: str, sent) -> None:
        """Attempt ``key`` went to ``address`` on its stream (again): ``sent`` until the
        answer comes."""
        entry = self.in_flight.get(key)
        if entry is None:  # forgotten before it could be sent: the answer is still awaited
            entry = self.in_flight[key] = InFlight(route, holds=False)
        entry.address, entry.sent = address, sent

    def sent(self, key: str, route: str):
        """What was sent of attempt ``key`` if its answer is awaited from ``route``'s
        stream, else None (nothing changes: see :meth:`answered`)."""
        entry = self.in_flight.get(key)
        return None if entry is None or entry.route != route else entry.sent

    def awaits(self, key: str, route: str) -> bool:
        """Whether attempt ``key``'s answer is awaited on a stream, sent by ``route``."""
        entry = self.in_flight.get(key)
        return entry is not None and entry.route == route and entry.sent is not None

    def awaited_at(self, address: str) -> list[str]:
        """The keys of the attempts whose answer is awaited on the stream to ``address``."""
        return [
            key
            for key, entry in self.in_flight.items()
            if entry.address == address and entry.sent is not None
        ]

    def answered(self, key: str, route: str) -> tuple | None:
        """Attempt ``key``'s answer came (or will never come): ``(address, sent)`` if it
        was awaited on a stream by ``route``, else None."""
        entry = self.in_flight.get(key)
        if entry is None or entry.route != route or entry.sent is None:
            return None
        sent, entry.sent = entry.sent, None
        if not entry.holds:
            del self.in_flight[key]
        return entry.address, sent

    # --- refs let go ----------------------------------------------------------------

    def released(self, task_id: str) -> None:
        """Nobody holds task ``task_id``'s ref any more (from any thread)."""
        self.released_ids.append(task_id)

    def with_released(self, events: tuple, released_event) -> tuple:
        """``events``, followed by one telling which refs were dropped since the last call."""
        if not self.released_ids:
            return events
        taken = [self.released_ids.popleft() for _ in range(len(self.released_ids))]
        return (*events, released_event(tuple(taken)))
