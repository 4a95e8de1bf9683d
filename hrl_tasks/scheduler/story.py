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
    fields: tuple


def _short(error) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def raw(item) -> tuple:
    """The few fields of an event or instruction that explain it, as they are (cheap:
    formatted only when a story is read); an error as its short text, never itself."""
    if isinstance(item, ev.Launch):
        return (item.attempt, item.kind, item.workers)
    if isinstance(item, ev.AttemptDone):
        error = None if item.error is None else _short(item.error)
        return (item.status, item.worker_lost, error)
    if isinstance(item, ev.Fail):
        return (_short(item.error),)
    if isinstance(item, ev.Started):
        return (item.worker,)
    if isinstance(item, ev.Ended):
        return (item.worker, item.elapsed)
    if isinstance(item, (ev.WorkerRemoved, ev.WorkerAdded)):
        return (item.address,)
    if isinstance(item, ev.WorkersSeen):
        return (tuple(sorted(item.workers)),)
    if isinstance(item, ev.RetryDue):
        return (item.attempt,)
    return ()


def detail(what: str, fields: tuple) -> str:
    """An entry's fields (see `raw`) as words."""
    if not fields:
        return ""
    if what == "Launch":
        attempt, kind, workers = fields
        return f"attempt {attempt} ({kind})" + (f" on {', '.join(workers)}" if workers else "")
    if what == "AttemptDone":
        status, lost, error = fields
        return status + (" (worker lost)" if lost else "") + (f": {error}" if error else "")
    if what == "Started":
        return f"on {fields[0]}"
    if what == "Ended":
        return f"on {fields[0]} after {fields[1]:.3f} s"
    if what == "WorkersSeen":
        return f"{len(fields[0])} workers: {', '.join(fields[0])}"
    if what == "RetryDue":
        return f"attempt {fields[0]}"
    return str(fields[0])


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
                self.entries.append(Entry(now, task_id, (), "Released", ()))
            return
        key = getattr(item, "key", None)
        keys = getattr(item, "keys", None) or ((key,) if key else ())
        task_id = getattr(item, "task_id", None) or (task_of_key(key) if key else None)
        if task_id is None and not isinstance(item, CLUSTER):
            return  # no task of this engine's (a nested engine's report, a forgotten attempt)
        self.entries.append(Entry(now, task_id, tuple(keys), type(item).__name__, raw(item)))

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
        text = detail(e.what, e.fields)
        lines.append(f"-{now - e.at:8.3f} s  {e.what}{key}" + (f": {text}" if text else ""))
    if status is None:
        lines.append("now: the engine no longer knows this task (it ended and was let go)")
    else:
        lines.append(f"now: {status}" + (f"; {'; '.join(where)}" if where else ""))
    return lines
