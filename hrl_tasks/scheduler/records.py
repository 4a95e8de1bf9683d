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


@dataclass(slots=True)
class TaskRecord:
    """What the driver holds of one task until it settles: its ref's outcome, how to
    run it (``(fn or method, args, kwargs, topic)``; None for a creation, a kill or a
    put) and, for a direct call, whether its result stays on the worker (``keep``)."""

    outcome: cf.Future
    payload: tuple | None = None
    keep: bool = False


@dataclass(slots=True)
class ObjectRecord:
    """What the driver holds of one stateful object while it may be made again: how to
    make it (``(factory, args, kwargs, topic)``) and its current creation's outcome."""

    recipe: tuple
    creation: cf.Future | None = None


class BackendRecords:
    """Per task id its record, per object id its record; per key its attempt's future.

    User threads add a task's record before they hand its event to the state
    machine; the backend reads and removes records as instructions say.
    """

    def __init__(self):
        self.tasks: dict[str, TaskRecord] = {}  # task id -> its record, until settled
        self.objects: dict[str, ObjectRecord] = {}  # obj id -> its record, until dropped
        self.futures: dict = {}  # key -> the attempt's future or Local result, until forgotten
        self.released_ids: deque = deque()  # refs dropped by their holders, for the next event

    # --- tasks --------------------------------------------------------------------

    def add_task(
        self, task_id: str, outcome: cf.Future, payload: tuple | None = None, keep: bool = False
    ) -> None:
        """Task ``task_id``: ``outcome`` settles when it does (see :class:`TaskRecord`)."""
        self.tasks[task_id] = TaskRecord(outcome, payload, keep)

    def payload_of(self, task_id: str) -> tuple | None:
        """``(fn or method, args, kwargs, topic)`` of an unsettled task, or None."""
        record = self.tasks.get(task_id)
        return None if record is None else record.payload

    def keeps(self, task_id: str) -> bool:
        """Whether the direct call ``task_id``'s result stays on its worker."""
        record = self.tasks.get(task_id)
        return record is not None and record.keep

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
