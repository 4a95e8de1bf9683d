"""What the state machine was told and what it said of each task, and a task's story.

As distributed's ``Scheduler.story(key)``: each entry is small (names, keys,
numbers and short texts, never a result, an argument or a traceback). Entries
are kept per task, while the engine knows the task and for the last tasks it let
go, so what is kept follows the tasks alive, not the hours run (one log of the
last 20,000 entries grew a search's driver by 2-3 MB per 10 minutes until full).
``story`` gives a task's entries and the cluster's events while it was pending,
then says where the task is now.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

from hrl_tasks.scheduler import events as ev

TASK_ENTRIES = 64  # per task: its first entry and its latest
ENDED_KEPT = 1_000  # stories of tasks the engine let go, the newest
ENDED_ENTRIES = 5_000  # and at most this many entries in them (a search's driver kept
# about 60 per trial: 1,000 trials' worth, some 15 MB, grew for half an hour)
CLUSTER_KEPT = 1_000  # workers seen, added and removed; the scheduler lost
SWEEP_SLACK = 1_000
QUIET = (ev.Tick, ev.Refresh, ev.Forget, ev.Later, ev.Supply, ev.DropObject)
CLUSTER = (ev.WorkersSeen, ev.WorkerRemoved, ev.WorkerAdded, ev.WorkerSilent, ev.SchedulerLost)
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
        on_stream = item.route == "direct" or item.direct_call  # its worker tells its half
        return (item.attempt, item.kind, item.workers, on_stream)
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
    if isinstance(item, ev.WorkerSilent):
        return (f"{item.address} {'stopped reporting' if item.silent else 'reports again'}",)
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
        attempt, kind, workers, on_stream = fields
        how = f"{kind}, on the engine's stream" if on_stream else kind
        return f"attempt {attempt} ({how})" + (f" on {', '.join(workers)}" if workers else "")
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
    if what == "Worker":
        return f"{fields[0]}: {fields[1]}"
    return str(fields[0])


class StoryLog:
    """Each task's entries while the engine knows it (its first and its latest
    ``TASK_ENTRIES``), the stories of the last ``ENDED_KEPT`` tasks let go (at most
    ``ENDED_ENTRIES`` entries in all), and the last ``CLUSTER_KEPT`` events of the
    cluster: what a long run keeps grows with the tasks alive, not with the tasks
    ever run.

    ``tasks`` is the state's table of tasks (read, never changed here).
    """

    def __init__(self, tasks: Mapping[str, object]):
        self.tasks = tasks
        self.live: dict[str, deque[Entry]] = {}
        self.ended: dict[str, deque[Entry]] = {}  # oldest first
        self.ended_entries = 0  # the entries in ``ended``
        self.cluster: deque[Entry] = deque(maxlen=CLUSTER_KEPT)

    def note(self, item, now: float, task_of_key) -> None:
        """Record ``item`` (an event or an instruction); ``task_of_key(key)`` finds a task id."""
        if isinstance(item, QUIET):
            return
        if isinstance(item, ev.Released):
            for task_id in item.task_ids:
                self._add(task_id, Entry(now, task_id, (), "Released", ()), new=False)
            return
        key = getattr(item, "key", None)
        keys = getattr(item, "keys", None) or ((key,) if key else ())
        named = getattr(item, "task_id", None)  # a submission names its task
        task_id = named or (task_of_key(key) if key else None)
        entry = Entry(now, task_id, tuple(keys), type(item).__name__, raw(item))
        if task_id is not None:
            self._add(task_id, entry, new=named is not None or task_id in self.tasks)
        elif isinstance(item, CLUSTER):
            self.cluster.append(entry)
        # else: no task of this engine's (a nested engine's report, a forgotten attempt)

    def _add(self, task_id: str, entry: Entry, new: bool) -> None:
        story = self.live.get(task_id)
        if story is None and task_id in self.ended:  # a late word of a task let go
            story = self.ended[task_id]
            self.ended_entries += len(story) < TASK_ENTRIES
        if story is None:
            if not new and task_id not in self.tasks:
                return
            story = self.live[task_id] = deque(maxlen=TASK_ENTRIES)
        if len(story) == TASK_ENTRIES:  # keep how it began: drop the oldest after it
            first = story.popleft()
            story.popleft()
            story.appendleft(first)
        story.append(entry)

    def let_go(self, task_ids) -> None:
        """The engine forgot ``task_ids``: their stories join the ended ones. Stories of
        tasks it forgot without saying (rare) are swept up when they pile up."""
        for task_id in task_ids:
            self._end(task_id)
        if len(self.live) > 2 * len(self.tasks) + SWEEP_SLACK:
            for task_id in [t for t in self.live if t not in self.tasks]:
                self._end(task_id)

    def _end(self, task_id: str) -> None:
        story = self.live.pop(task_id, None)
        if story is None:
            return
        self.ended[task_id] = story
        self.ended_entries += len(story)
        while len(self.ended) > ENDED_KEPT or self.ended_entries > ENDED_ENTRIES:
            self.ended_entries -= len(self.ended.pop(next(iter(self.ended))))

    def entries(self) -> int:
        """How many entries are kept."""
        stories = (*self.live.values(), *self.ended.values())
        return sum(map(len, stories)) + len(self.cluster)

    def of(self, task_id: str) -> list[Entry]:
        """The entries of ``task_id`` and its attempts, with the cluster's events between."""
        mine = list(self.live.get(task_id) or self.ended.get(task_id) or ())
        if not mine:
            return []
        first = mine[0].at
        between = [e for e in self.cluster if e.at >= first]
        return sorted(mine + between, key=lambda e: e.at)  # stable: ties keep their order


def on_streams(entries: list[Entry]) -> dict[str, set[str]]:
    """The workers whose half of these entries' story is theirs to tell: address ->
    the keys of the attempts sent there on an engine's stream (direct-route tasks
    and direct calls; Dask's route has Dask's own story, ``client.story``)."""
    places: dict[str, set[str]] = {}
    for e in entries:
        if e.what == "Launch" and e.fields[3] and e.fields[2]:
            places.setdefault(e.fields[2][0], set()).update(e.keys)
    return places


def on_dask(entries: list[Entry]) -> set[str]:
    """The keys of these entries' attempts sent on Dask's route, whose story Dask's
    scheduler and workers keep (``client.story``)."""
    return {key for e in entries if e.what == "Launch" and not e.fields[3] for key in e.keys}


def dask_record(record) -> tuple[str, str, float] | None:
    """``(key, what, timestamp)`` of one record of a Dask story (the scheduler's or a
    worker's log: the key first, its wall-clock time last; a transition has its
    states, then the recommendations, then the stimulus: ``(key, start, finish,
    recommendations, stimulus_id, timestamp)`` on the scheduler, ``(key, start,
    asked, finish, recommendations, stimulus_id, timestamp)`` on a worker), or None
    for a record of another shape."""
    if not isinstance(record, (list, tuple)) or len(record) < 3:
        return None
    key, *middle, stamp = record
    if not isinstance(stamp, (int, float)):
        return None
    plain = [str(m) for m in middle if not isinstance(m, (dict, list, tuple))]
    recommendations = next((i for i, m in enumerate(middle) if isinstance(m, dict)), None)
    if recommendations is None:
        what = " ".join(plain)
    else:  # a transition: its states in turn (one asked and reached said once)
        states = [str(m) for m in middle[:recommendations]]
        states = [x for i, x in enumerate(states) if i == 0 or x != states[i - 1]]
        rest = [str(m) for m in middle[recommendations + 1 :] if not isinstance(m, dict)]
        what = " -> ".join(states) + (f" ({' '.join(rest)})" if rest else "")
    return str(key), f"Dask: {what}"[:TEXT_LIMIT], float(stamp)


def told(entries: list[tuple], now: float, task_id: str) -> list[Entry]:
    """Workers' entries, ``(age, address, key, what)``, as entries of this clock."""
    return [
        Entry(now - age, task_id, (key,), "Worker", (address, what))
        for age, address, key, what in entries
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
