"""What every backend keeps beside the state machine: the values it cannot hold.

The state machine knows tasks by id and attempts by key; the functions, their
arguments, the futures handed out and the results in flight live here.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque


class BackendRecords:
    """Per task id: its ref's outcome and its arguments; per key: its attempt's future.

    User threads add a task's entries before they hand its event to the
    state machine; the backend reads and removes them as instructions say.
    """

    def __init__(self):
        self.outcomes: dict[str, cf.Future] = {}  # task id -> its ref's outcome, until settled
        self.payloads: dict[str, tuple] = {}  # task id -> (fn or method, args, kwargs, topic)
        self.keep: set[str] = set()  # task ids of direct calls whose result stays on the worker
        self.objects: dict[str, tuple] = {}  # obj id -> (factory, args, kwargs, topic)
        self.creations: dict[str, cf.Future] = {}  # obj id -> its current creation's outcome
        self.futures: dict = {}  # key -> the attempt's future or Local result, until forgotten
        self.released_ids: deque = deque()  # refs dropped by their holders, for the next event

    def settle(self, task_id: str, value=None, error: BaseException | None = None) -> None:
        """Resolve task ``task_id``'s outcome with ``value`` or ``error`` (once)."""
        outcome = self.outcomes.pop(task_id, None)
        self.payloads.pop(task_id, None)
        self.keep.discard(task_id)
        if outcome is None or outcome.done():
            return
        if error is None:
            outcome.set_result(value)
        else:
            outcome.set_exception(error)

    def released(self, task_id: str) -> None:
        """Nobody holds task ``task_id``'s ref any more (from any thread)."""
        self.released_ids.append(task_id)

    def with_released(self, events: tuple, released_event) -> tuple:
        """``events``, followed by one telling which refs were dropped since the last call."""
        if not self.released_ids:
            return events
        taken = [self.released_ids.popleft() for _ in range(len(self.released_ids))]
        return (*events, released_event(tuple(taken)))
