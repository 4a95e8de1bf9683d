"""A bounded log of what the state machine was told and what it said, and a task's story.

As distributed's ``Scheduler.story(key)``: each entry is small (names, keys,
numbers and short texts, never a result, an argument or a traceback), so the
log costs a few MB at most whatever runs. ``story`` picks out a task's
entries (by its id and its attempts' keys) and the cluster's events while it
was pending, then says where the task is now.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from hrl_tasks.scheduler import events as ev

LOG_LENGTH = 20_000
QUIET = (ev.Tick, ev.Refresh, ev.Forget, ev.Later, ev.Supply, ev.DropObject)
CLUSTER = (ev.WorkersSeen, ev.WorkerRemoved, ev.WorkerAdded, ev.SchedulerLost)
TEXT_LIMIT = 160


class Entry(NamedTuple):
    at: float
    task_id: str | None
    keys: tuple
    what: str
    detail: str


def _short(error) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def detail(item) -> str:
    """The few fields of an event or instruction that explain it."""
    if isinstance(item, ev.Launch):
        where = "" if item.workers is None else f" on {', '.join(item.workers)}"
        return f"attempt {item.attempt} ({item.kind}){where}"
    if isinstance(item, ev.AttemptDone):
        lost = " (worker lost)" if item.worker_lost else ""
        return item.status + lost + (f": {_short(item.error)}" if item.error is not None else "")
    if isinstance(item, ev.Fail):
        return _short(item.error)
    if isinstance(item, (ev.Started, ev.Ended)):
        return f"on {item.worker}" + (
            f" after {item.elapsed:.3f} s" if isinstance(item, ev.Ended) else ""
        )
    if isinstance(item, (ev.WorkerRemoved, ev.WorkerAdded)):
        return item.address
    if isinstance(item, ev.WorkersSeen):
        return f"{len(item.workers)} workers: {', '.join(sorted(item.workers))}"
    if isinstance(item, ev.RetryDue):
        return f"attempt {item.attempt}"
    return ""


class StoryLog:
    """The last ``length`` events and instructions that concern tasks or the cluster."""

    def __init__(self, length: int = LOG_LENGTH):
        self.entries: deque[Entry] = deque(maxlen=length)

    def note(self, item, now: float, task_of_key) -> None:
        """Record ``item`` (an event or an instruction); ``task_of_key(key)`` finds a task id."""
        if isinstance(item, QUIET):
            return
        if isinstance(item, ev.Released):
            for task_id in item.task_ids:
                self.entries.append(Entry(now, task_id, (), "Released", ""))
            return
        key = getattr(item, "key", None)
        keys = getattr(item, "keys", None) or ((key,) if key else ())
        task_id = getattr(item, "task_id", None) or (task_of_key(key) if key else None)
        if task_id is None and not keys and not isinstance(item, CLUSTER):
            return
        self.entries.append(Entry(now, task_id, tuple(keys), type(item).__name__, detail(item)))

    def of(self, task_id: str) -> list[Entry]:
        """The entries of ``task_id`` and its attempts, with the cluster's events between."""
        keys = {task_id}
        for entry in self.entries:
            if entry.task_id == task_id:
                keys.update(entry.keys)
        mine = [e for e in self.entries if e.task_id == task_id or keys.intersection(e.keys)]
        if not mine:
            return []
        first, picked = mine[0].at, {id(e) for e in mine}
        return [
            e
            for e in self.entries
            if id(e) in picked or (e.task_id is None and not e.keys and e.at >= first)
        ]


def render(entries: list[Entry], now: float, where: list[str], status: str | None) -> list[str]:
    """Lines a person reads: each entry's age, then where the task is now."""
    lines = []
    for e in entries:
        key = f" {','.join(e.keys)}" if e.keys and e.keys != (e.task_id,) else ""
        lines.append(f"-{now - e.at:8.3f} s  {e.what}{key}" + (f": {e.detail}" if e.detail else ""))
    if status is None:
        lines.append("now: the engine no longer knows this task (it ended and was let go)")
    else:
        lines.append(f"now: {status}" + (f"; {'; '.join(where)}" if where else ""))
    return lines
