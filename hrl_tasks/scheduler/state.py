"""The engine's state, and every decision it takes: ``handle(*events) -> instructions``.

No I/O, no threads, no clock of its own: the time comes with each call
(``now=``). One owner calls :meth:`EngineState.handle` (the Dask client's event
loop, or the caller's thread in the synchronous engine); others only read.
Tested by feeding events and asserting the state and the instructions.

State:
    tasks[task_id]        every task whose ref is still held or that is not done: a
                          plain task, or a call of a stateful object (creations,
                          snapshots and destructions are calls too).
    attempts[key]         every launched copy not yet ended: its task, number
                          (a backup shares the number it copies), the input keys
                          it was launched with, and where and when it runs.
    objects[obj_id]       stateful objects: home worker, numbering of calls,
                          calls in flight, snapshots awaited, restarts.
    ledger                what each worker declared and what objects hold.
    nthreads[worker]      threads per worker.
    spec                  speculation: copies running per worker, losers, speeds.
    stats                 counters and per-name durations.

Decisions:
    Retry (:mod:`~hrl_tasks.scheduler.retry`): a failed attempt of a plain task
    runs again with a fresh key while its policy allows; an input that was being
    retried when the attempt started makes it run again on the new input (not a
    retry); a failed input fails the task.
    Calls: numbered per object; a call of an object with ``get_state`` resolves
    once a snapshot taken after it is stored (a call that ends before its
    object's creation has reported waits for that report). A call whose worker died moves
    the object (``_recover``): the object is placed elsewhere, rebuilt from its
    last snapshot, and calls that may have started fail unless the object was
    created with ``reissue_calls``.
    Speculation (:func:`~hrl_tasks.scheduler.speculation.plan_backups`): on each
    tick, stragglers get backups; the first copy to finish wins and the others
    are cancelled.
    Placement (:class:`~hrl_tasks.scheduler.resources.Ledger`): an object takes
    its resources for life; with no room now it waits for room (its calls
    queue), after the loss of its worker for at most ``placement_timeout``. A
    request no worker could ever meet fails a new object at once; a lost object's
    waits (its new home may still be joining, declaring nothing yet).
    Inputs: a task whose input has no attempt running (in a retry's back-off,
    or queued on an object without a home) waits for that input to settle.
    Scheduler lost: Dask has cancelled everything, so every task and object fails
    with :class:`SchedulerLostError`, and so does whatever is submitted later.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
from dataclasses import dataclass, field
from typing import Any

from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler import retry as retry_rules
from hrl_tasks.scheduler.errors import (
    EngineError,
    ObjectStartError,
    ResourceError,
    SchedulerLostError,
    WorkerLostError,
)
from hrl_tasks.scheduler.placement import (
    MAX_PIPELINE,
    LeastLoaded,
    choose_worker,
    pipeline_depth,
)
from hrl_tasks.scheduler.resources import Ledger, shown
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.speculation import (
    Copy,
    SpecTask,
    SpeculationPolicy,
    WorkerSpeed,
    plan_backups,
)
from hrl_tasks.scheduler.stats import EngineStats, remember
from hrl_tasks.scheduler.status import CANCELLED, FAILED, FINISHED, PENDING
from hrl_tasks.scheduler.story import StoryLog, on_dask, on_streams, render, told
from hrl_tasks.scheduler.validate import check, where_is

HANDLERS: dict[type, str] = {}  # an event's class -> the name of its method, as seen
SPECULATION_TICK_S = 0.02
SWEEP_TICK_S = 1.0
# A task's event reaches the state machine within one pass of the event loop after its
# ref exists, so a release still unmatched this long after was of a task already
# forgotten. (The refs of creations and destructions, internal tasks dropped once they
# ended, tell nothing when dropped: TaskRef.forgotten_at_end.)
RELEASED_EARLY_S = 60.0
# A worker whose task stream broke gets no direct-route task for this long, unless it is
# seen to leave (then it is gone) or a new stream is wanted after it (then it is tried).
UNREACHABLE_S = 10.0
# A finished task whose result was lost before it was read runs again at most this often.
RECOMPUTE_LIMIT = 3
# What counts as progress for a wait that watches for stalls (not WorkersSeen: a sweep).
PROGRESS = (ev.AttemptDone, ev.Started, ev.Ended, ev.InputsLost, ev.WorkerAdded, ev.WorkerRemoved)
# Once the scheduler is lost these fail at once: they would need it to run.
NEEDS_SCHEDULER = (ev.SubmitTask, ev.CallObject, ev.CreateObject, ev.ResultLost)


@dataclass(frozen=True)
class Timings:
    """How long the engine waits, looks again and tries again, where the state machine
    does not hold the clock itself: the backend carries these out and keeps none of
    its own (one owner; a test may shorten them)."""

    linger_s: float = 0.1  # how long a result's future is held after it is handed out
    fetch_check_s: float = 0.5  # how often a fetch of a call's result checks it still exists
    holder_silent_s: float = 3.0  # a fetch this long asks whether its holders still report
    scheduler_check_s: float = 0.25  # how often the client's link to the scheduler is looked at
    call_cut_check_s: float = 5.0  # a broken stream's direct calls: wait for the worker's removal
    place_tries: int = 5  # engine.put to a worker that just died: tries ...
    place_retry_s: float = 0.2  # ... and the back-off, longer each time
    place_check_s: float = 3.0  # a put this long asks whether its worker still reports
    place_poll_s: float = 0.5  # ... then asks this often (this soon if a worker is silent)
    story_ask_s: float = 2.0  # a story waits this long for a worker's half of it
    stream_connect_s: float = 5.0  # to open a worker's task stream; no answer: the worker is lost
    fetch_connect_s: float = 2.0  # to reach the worker keeping a result; then it is lost

    def place_retry_after(self, tries: int) -> float | None:
        """After ``tries`` puts that failed on a worker that just died (the scheduler
        drops it soon): seconds to wait before the next, or None: give up."""
        return None if tries >= self.place_tries else self.place_retry_s * tries


@dataclass
class Task:
    """One logical task: what its ref resolves to, and its attempts."""

    task_id: str
    name: str
    kind: str = "task"  # task, create, call, snapshot, destroy, put
    deps: tuple = ()
    request: dict = field(default_factory=dict)
    policy: RetryPolicy | None = None
    speculation: SpeculationPolicy | None = None
    obj_id: str | None = None
    seq: int = -1
    method: str | None = None
    internal: bool = False
    direct_call: bool = False
    status: str = PENDING
    error: BaseException | None = None
    winner: str | None = None  # the key whose result the task resolved with
    current: str | None = None  # the key of the newest attempt
    attempts: int = 0
    live: dict = field(default_factory=dict)  # key -> sent at
    backups: set = field(default_factory=set)  # keys of backup copies
    linked: list = field(default_factory=list)  # backup calls on peers (task ids)
    backup_of: str | None = None
    waiting_on: set = field(default_factory=set)  # inputs awaited before a rerun
    retry_due: float | None = None  # when its retry's back-off ends, while it waits it out
    after_inputs: tuple | None = None  # (attempt, error, rerun) to decide once they settle
    released: bool = False
    held_on: str | None = None  # the one worker its result lives on, if it was pinned there
    lost: BaseException | None = None  # that worker died: the result is gone for good
    recomputed: int = 0  # runs after its finished result was lost (see ResultLost)
    route: str = "dask"  # "direct": placed by the engine and sent straight to a worker
    room_wait: tuple | None = None  # (attempt, key, away_from) while it waits for a free slot


@dataclass
class Attempt:
    key: str
    task_id: str
    number: int
    inputs: dict
    pinned: str | None = None  # the worker it was sent to, if pinned
    worker: str | None = None  # where it runs, once reported
    started_at: float | None = None
    sent_to: str | None = None  # the worker a direct-route attempt was sent to
    lent: bool = False  # it waited for other tasks: its resources are lent until it ends


@dataclass
class ObjectState:
    """The driver's record of one stateful object."""

    obj_id: str
    name: str
    label: str
    request: dict
    strategy: str
    max_restarts: int
    reissue_calls: bool
    address: str | None = None
    next_seq: int = 0
    restarts: int = 0
    has_state: bool = False
    thread_safe: bool = False
    gone: BaseException | None = None
    creation: str | None = None  # task id of the current incarnation's creation
    calls: dict = field(default_factory=dict)  # seq -> task id, in flight
    queued: list = field(default_factory=list)  # task ids waiting for a home
    snapshots: dict = field(default_factory=dict)  # snapshot seq -> [(task id, key)]
    held: list = field(default_factory=list)  # (task, key, value) ended before the creation did
    snapshot: Any = None
    snapshot_seq: int = -1
    group: tuple = ()
    exclude: frozenset = frozenset()  # where not to place it (the worker it just lost)
    avoid: frozenset = frozenset()  # where to place it only if nowhere else has room
    unplaced_since: float | None = None


@dataclass
class SpeculationState:
    """What speculation needs to know about copies and workers."""

    running: dict = field(default_factory=dict)  # key -> (worker, started at)
    busy: dict = field(default_factory=dict)  # worker -> copies running there
    reserved: dict = field(default_factory=dict)  # backup key -> worker, not started yet
    losers: dict = field(default_factory=dict)  # loser key -> when the winner finished
    detached: set = field(default_factory=set)  # running losers, out of their worker's pool
    live: set = field(default_factory=set)  # speculative task ids not done
    speed: WorkerSpeed = field(default_factory=WorkerSpeed)


class EngineState:
    """Everything the engine knows, advanced only by :meth:`handle`.

    Args:
        key_prefix: makes this engine's keys unique in the cluster.
        placement_timeout: seconds a call may wait for its object to find a home
            before it fails with :class:`WorkerLostError`.
        sweep_s: seconds between looks at the workers while objects live (what
            finds dead workers when no event tells; a backstop when events do).
        validate: check every invariant (:mod:`~hrl_tasks.scheduler.validate`)
            after each :meth:`handle`; for tests, slow.
        timings: the waits and retries the backend carries out (:class:`Timings`).
    """

    def __init__(
        self,
        key_prefix: str = "",
        placement_timeout: float = 30.0,
        sweep_s: float = SWEEP_TICK_S,
        validate: bool = False,
        timings: Timings = Timings(),
    ):
        self.key_prefix = key_prefix
        self.timings = timings
        self.validating = validate
        self.progress_at = 0.0  # when an attempt last started or ended, or a worker came or went
        self.placement_timeout = placement_timeout
        self.sweep_s = sweep_s
        self.tasks: dict[str, Task] = {}
        self.log = StoryLog(self.tasks)
        self._let_go: list[str] = []  # tasks forgotten in this handling, for the log
        self.attempts: dict[str, Attempt] = {}
        self.objects: dict[str, ObjectState] = {}
        self.ledger = Ledger()
        self.nthreads: dict[str, int] = {}
        self.sent: dict[str, set] = {}  # worker -> direct-route attempts sent there, not ended
        self.sent_requests: dict[str, dict] = {}  # worker -> what those attempts asked for
        self.sent_waiting: dict[str, set] = {}  # worker -> those of them waiting for others
        self.load = LeastLoaded()  # live workers by those attempts per thread (not waiting)
        self.room: collections.deque = collections.deque()  # task ids waiting for a slot
        self.unplaced: dict[str, None] = {}  # objects waiting for room, oldest first (and
        # some placed or gone since: `_waiting_objects` drops those as it reads)
        self.room_freed = False  # a slot freed while tasks wait: place them after this handle
        self.unreachable: dict[str, float] = {}  # worker -> when its task stream broke
        self.silent: set[str] = set()  # workers that stopped reporting (WorkerSilent)
        self.mean_s: dict[str, float] = {}  # task name -> a moving mean of its durations
        self.tally: dict[str, list] = {}  # task name -> [finished, failed] (the live page)
        self.spec = SpeculationState()
        self.stats = EngineStats()
        self.waiters: dict[str, set] = {}  # input task id -> tasks waiting for it to settle
        self.tick_at: float | None = None  # when the next Tick is due, if one is
        self.swept_at = -1e9
        self.released_early: dict[str, float] = {}  # refs dropped before their task came -> when
        self.scheduler_lost: SchedulerLostError | None = None  # then nothing runs any more
        self._keys = itertools.count()
        self._out: list = []
        self.now = 0.0

    def new_key(self, name: str) -> str:
        """A fresh key (Dask groups keys by the part before the hex suffix)."""
        return f"{name}-{self.key_prefix}{next(self._keys):08x}"

    # --- the one entry point ----------------------------------------------------

    def handle(self, *events, now: float = 0.0) -> list:
        """Advance the state by ``events`` (in order); return the instructions."""
        self.now = now
        self._out = []
        for event in events:
            self.log.note(event, now, self._task_of_key)
            if isinstance(event, PROGRESS):
                self.progress_at = now
            if self.scheduler_lost is not None and isinstance(event, NEEDS_SCHEDULER):
                self._emit(ev.Fail(event.task_id, self.scheduler_lost))
                continue
            kind = type(event)
            name = HANDLERS.get(kind) or HANDLERS.setdefault(kind, f"_on_{kind.__name__}")
            getattr(self, name)(event)
        if self.room_freed:
            self._place_room()
        delay = SPECULATION_TICK_S if self.spec.live else self.sweep_s
        if (self.tick_at is None or now + delay < self.tick_at - 1e-3) and (
            self.spec.live or self._needs_sweep()
        ):
            self.tick_at = now + delay  # a sooner tick replaces a later one
            self._emit(ev.Later(delay, ev.Tick()))
        out, self._out = self._out, []
        for instruction in out:
            self.log.note(instruction, now, self._task_of_key)
        forgotten, self._let_go = self._let_go, []
        self.log.let_go(forgotten)
        if self.validating:
            check(self)
        return out

    def _task_of_key(self, key: str) -> str | None:
        attempt = self.attempts.get(key)
        return None if attempt is None else attempt.task_id

    def validate(self) -> None:
        """Raise :class:`~hrl_tasks.scheduler.validate.InvalidState` if an invariant is broken."""
        check(self)

    def story(self, task_id: str, now: float | None = None, workers_told=()) -> list[str]:
        """What happened to ``task_id`` (and the cluster meanwhile), oldest first, and
        where it is now: lines for a person to read. ``now``: the clock's time
        (default: that of the last event handled). ``workers_told``: the workers' half,
        ``(age, address, key, what)`` each, asked of those :meth:`story_workers` names."""
        now = self.now if now is None else now
        task = self.tasks.get(task_id)
        where = where_is(self, task, now) if task is not None and task.status == PENDING else []
        status = None if task is None else f"{task.status} after {task.attempts} attempts"
        entries = self.log.of(task_id) + told(list(workers_told), now, task_id)
        return render(sorted(entries, key=lambda e: e.at), now, where, status)

    def story_workers(self, task_id: str) -> tuple[dict[str, set[str]], set[str]]:
        """Who keeps the other half of ``task_id``'s story: the workers its attempts
        were sent to on an engine's stream (address -> keys), and the keys of those
        sent on Dask's route (Dask's scheduler and workers keep theirs)."""
        entries = self.log.of(task_id)
        return on_streams(entries), on_dask(entries)

    def _add(self, task: Task) -> Task:
        self.tasks[task.task_id] = task
        if self.released_early.pop(task.task_id, None) is not None:
            task.released = True
        return task

    def _emit(self, instruction) -> None:
        self._out.append(instruction)

    def demand(self) -> int:
        """Threads' worth of work: plain tasks not done (waiting or running) and
        stateful objects alive (each may be called at any time)."""
        tasks = sum(1 for t in self.tasks.values() if t.kind == "task" and t.status == PENDING)
        return tasks + sum(1 for o in self.objects.values() if o.gone is None)

    def _needs_sweep(self) -> bool:
        """Objects live, or released ones the scheduler may still show (the next read
        that does not show them lets the ledger forget them)."""
        return bool(self.ledger.released) or any(o.gone is None for o in self.objects.values())

    # --- plain tasks ------------------------------------------------------------

    def _on_SubmitTask(self, e: ev.SubmitTask) -> None:
        task = self._add(
            Task(
                e.task_id,
                e.name,
                deps=e.deps,
                request=e.request,
                policy=e.policy,
                speculation=e.speculation,
                route=e.route,
            )
        )
        self.stats.count("submitted")
        if self._failed_input(task) is None:
            self._launch(task, 0, key=e.task_id)
        if task.speculation is not None and task.status == PENDING:
            self.spec.live.add(task.task_id)

    def _on_ResultLost(self, e: ev.ResultLost) -> None:
        """Run a finished plain task again whose result was lost before it was read
        (at most ``RECOMPUTE_LIMIT`` times; it is not charged to its retries)."""
        task = self.tasks.get(e.task_id)
        if task is None or task.kind != "task" or task.status != FINISHED:
            why = "it is not a finished task" if task is None else f"it is {task.status}"
            self._emit(
                ev.Fail(
                    e.task_id,
                    WorkerLostError(
                        f"the result of task {e.task_id} was lost and cannot be computed again: {why}"
                    ),
                )
            )
            return
        if task.recomputed >= RECOMPUTE_LIMIT:
            self._emit(
                ev.Fail(
                    e.task_id,
                    WorkerLostError(
                        f"the result of {task.name!r} was lost with its worker "
                        f"{task.recomputed + 1} times; it is not computed again"
                    ),
                )
            )
            return
        task.status, task.winner, task.recomputed = PENDING, None, task.recomputed + 1
        self.stats.count("recomputed")
        if self._failed_input(task) is None:
            self._launch(task, task.attempts, away_from=e.away_from)
        if task.speculation is not None and task.status == PENDING:
            self.spec.live.add(task.task_id)

    def _on_PutValue(self, e: ev.PutValue) -> None:
        self._add(
            Task(e.task_id, "put", kind="put", status=FINISHED, winner=e.task_id, current=e.task_id)
        )

    def _launch(
        self,
        task: Task,
        number: int,
        key: str | None = None,
        backup_on=None,
        away_from=None,
        placed_on=None,
    ) -> None:
        """Send attempt ``number`` of ``task`` (a backup copy if ``backup_on`` is a worker;
        on another worker than ``away_from``, if one has room).

        An input that is pending with no attempt running (waiting for a retry's
        back-off, for its own inputs, or for its object's new home) has no
        result to point at yet: the task waits for it to settle first.
        """
        idle = {
            d
            for d in task.deps
            if d in self.tasks and self.tasks[d].status == PENDING and not self.tasks[d].live
        }
        if idle and backup_on is None:
            self._wait_for_inputs(task, idle, (number, None, True))
            return
        obj = self.objects.get(task.obj_id) if task.obj_id else None
        direct_route = obj is None and task.kind == "task" and task.route == "direct"
        if direct_route and not self._direct_inputs(task):
            task.route, direct_route = "dask", False  # its inputs are in Dask: so is it
        sent_to = backup_on or placed_on
        if direct_route and sent_to is None:
            # Behind tasks already waiting, a plain task waits too (first come, first served).
            queue_behind = self.room and not task.request and away_from is None
            sent_to = None if queue_behind else self._place_direct(task, away_from)
            if sent_to is None:  # every worker is full, or others wait: it waits for a slot
                task.room_wait = (number, key, away_from)
                self.room.append(task.task_id)
                self.room_freed = self.room_freed or queue_behind  # a look after this handle
                return
        key = key or self.new_key(task.name)
        inputs = {d: self.tasks[d].current for d in task.deps if d in self.tasks}
        workers = None
        if obj is not None:
            workers = (obj.address,)
        elif sent_to is not None:
            workers = (sent_to,)
        elif task.speculation is not None or away_from is not None or self.silent:
            workers = self._healthy_workers(away_from)
        # Only an object's calls are bound to a worker; a plain task's workers are a
        # preference (its result can be computed again elsewhere if its worker dies).
        self.attempts[key] = Attempt(
            key,
            task.task_id,
            number,
            inputs,
            pinned=obj.address if obj is not None else None,
            sent_to=sent_to if direct_route else None,
        )
        if direct_route:
            self._count_sent(key, sent_to, task.request, +1)
        task.live[key] = self.now
        task.retry_due = None
        task.current = key
        task.attempts += 1
        if backup_on is not None:
            task.backups.add(key)
            self.spec.reserved[key] = backup_on
            self.spec.busy[backup_on] = self.spec.busy.get(backup_on, 0) + 1
        self._emit(
            ev.Launch(
                key,
                task.task_id,
                task.name,
                number,
                kind=task.kind,
                workers=workers,
                strict=obj is not None or direct_route,
                route="direct" if direct_route else "dask",
                priority=1 if backup_on is not None else 0,
                inputs=inputs,
                request=task.request,
                internal=task.internal,
                direct_call=task.direct_call,
                fetch=task.kind in ("create", "snapshot"),
                obj_id=task.obj_id,
                seq=task.seq,
                method=task.method,
                state=obj.snapshot if obj and task.kind == "create" else None,
                args_of=task.backup_of,
                watched=task.speculation is not None or task.backup_of is not None,
            )
        )

    def _failed_input(self, task: Task) -> BaseException | None:
        """Fail ``task`` if one of its inputs failed; returns that input's error."""
        for dep in task.deps:
            found = self.tasks.get(dep)
            if found is not None and (found.status in (FAILED, CANCELLED) or found.lost):
                error = found.lost or found.error or EngineError(f"input {found.name!r} failed")
                self._fail(task, error)
                self._skip(task)  # a call that never runs must not block later calls
                return error
        return None

    def _on_AttemptDone(self, e: ev.AttemptDone) -> None:
        attempt = self.attempts.pop(e.key, None)
        if attempt is None:
            self._emit(ev.Forget((e.key,)))
            return
        self._unsend(attempt)
        reserved = self.spec.reserved.pop(e.key, None)
        if reserved is not None:  # a backup that ends without a start report
            self.spec.busy[reserved] = max(0, self.spec.busy.get(reserved, 0) - 1)
        task = self.tasks[attempt.task_id]
        task.live.pop(e.key, None)
        if task.status != PENDING:
            self._emit(ev.Forget((e.key,)))
            return
        if e.status == "finished":
            task.held_on = None if task.direct_call else attempt.pinned
            self._attempt_finished(task, attempt, e.value)
        elif e.status == "cancelled":
            self._emit(ev.Forget((e.key,)))
            if not task.live:
                self._cancel(task, f"task {task.name!r} was cancelled")
        else:
            self._emit(ev.Forget((e.key,)))
            if not task.live:
                self._attempt_failed(task, attempt, e.error, e.worker_lost)

    def _on_InputsLost(self, e: ev.InputsLost) -> None:
        """Dask cancelled an attempt whose input data vanished: put values come from
        the driver again (under a new key), and the attempt runs again on them."""
        for put_id in e.lost:
            put = self.tasks.get(put_id)
            if put is not None and put.kind == "put" and put.status == FINISHED:
                put.winner = put.current = self.new_key("put")
                self._emit(ev.Resend(put_id, put.current))
        attempt = self.attempts.get(e.key)
        task = self.tasks.get(attempt.task_id) if attempt is not None else None
        resent = task is not None and any(
            self.tasks[d].kind == "put" and self.tasks[d].winner != key
            for d, key in attempt.inputs.items()
            if d in self.tasks
        )
        if not resent:
            self._on_AttemptDone(ev.AttemptDone(e.key, "cancelled"))
            return
        self._unsend(self.attempts.pop(e.key))
        task.live.pop(e.key, None)
        self._emit(ev.Forget((e.key,)))
        self.stats.count("inputs_resent")
        if task.status == PENDING and not task.live:
            self._launch(task, attempt.number)

    def _attempt_finished(self, task: Task, attempt: Attempt, value) -> None:
        obj = self.objects.get(task.obj_id) if task.obj_id else None
        if obj is None:
            self._finish(task, attempt.key)
            return
        obj.calls.pop(task.seq, None)
        if task.kind == "create":
            obj.has_state, obj.thread_safe = value["has_state"], value["thread_safe"]
            self._finish(task, attempt.key)
            held, obj.held = obj.held, []
            for held_task, key, held_value in held:  # in the order they ended
                if held_task.status == PENDING:
                    self._call_finished(obj, held_task, key, held_value)
            return
        creation = self.tasks.get(obj.creation) if obj.creation else None
        if creation is not None and creation.status == PENDING:
            # The creation's report (has_state) is still on its way: decide after it.
            obj.held.append((task, attempt.key, value))
            return
        self._call_finished(obj, task, attempt.key, value)

    def _call_finished(self, obj: ObjectState, task: Task, key: str, value) -> None:
        if task.kind == "snapshot":
            self._snapshot_stored(obj, task, key, value)
        elif task.kind == "call" and obj.has_state and obj.gone is None:
            self._resolve_after_snapshot(obj, task, key)
        else:
            self._finish(task, key)
            if task.kind == "destroy":
                self._object_ended(obj)

    def _finish(self, task: Task, key: str, by_backup: bool = False) -> None:
        """Resolve ``task`` with the result of ``key``; cancel its other copies."""
        if task.status != PENDING:
            return
        task.status, task.winner, task.current = FINISHED, key, key
        losers = self._drop_copies(task, exclude=key)
        self._emit(ev.Resolve(task.task_id, key))
        if losers and task.obj_id is not None and not task.direct_call:
            self._skip(task)  # a copy that never runs must not block later calls
        if not task.internal and task.kind in ("task", "call"):
            self.stats.count("finished")
            remember(self.tally, task.name, self.tally.get(task.name, [0, 0]))[0] += 1
        for peer_id in task.linked:
            peer = self.tasks.get(peer_id)
            if peer is not None and peer.status == PENDING:
                losers += list(peer.live)
                self._cancel(peer, "a copy on another worker won")
        if task.backup_of is not None:
            original = self.tasks.get(task.backup_of)
            if original is not None and original.status == PENDING:
                original.held_on = task.held_on
                self._finish(original, key, by_backup=True)
        self._settled(task)
        if task.speculation is not None and (task.backups or by_backup):
            self._speculation_finished(task, key, losers, by_backup)
        self._emit(ev.Forget((key,)))

    def _drop_copies(self, task: Task, exclude: str | None = None) -> list:
        others = [k for k in task.live if k != exclude]
        task.live.clear()
        for key in others:
            self._drop_attempt(key)
        if others:
            self._emit(ev.Cancel(tuple(others)))
        return others

    def _drop_attempt(self, key: str) -> None:
        """Forget attempt ``key``: its slot and any reserved backup slot are free again."""
        dropped = self.attempts.pop(key, None)
        if dropped is not None:
            self._unsend(dropped)  # the worker gives a dropped copy's slot back at once
        reserved = self.spec.reserved.pop(key, None)
        if reserved is not None:
            self.spec.busy[reserved] = max(0, self.spec.busy.get(reserved, 0) - 1)

    def _fail(self, task: Task, error: BaseException, count: bool = True) -> None:
        if task.status != PENDING:
            return
        task.status, task.error = FAILED, error
        self._drop_copies(task)
        self._emit(ev.Fail(task.task_id, error))
        if count and not task.internal and task.kind in ("task", "call"):
            self.stats.count("failed")
            remember(self.tally, task.name, self.tally.get(task.name, [0, 0]))[1] += 1
        self._settled(task)

    def _cancel(self, task: Task, message: str) -> None:
        if task.status != PENDING:
            return
        task.status, task.error = CANCELLED, cf.CancelledError(message)
        self._drop_copies(task)
        self._emit(ev.Fail(task.task_id, task.error))
        if not task.internal:
            self.stats.count("cancelled")
        if task.obj_id is not None and not task.direct_call:
            self._skip(task)
        self._settled(task)

    def _settled(self, task: Task) -> None:
        """After ``task`` is done: wake tasks waiting for it, forget it if nobody holds it."""
        self.spec.live.discard(task.task_id)
        task.room_wait = None  # if it waited for a slot, it is skipped there
        obj = self.objects.get(task.obj_id) if task.obj_id else None
        if obj is not None and obj.calls.get(task.seq) == task.task_id:
            del obj.calls[task.seq]
        for waiter_id in self.waiters.pop(task.task_id, ()):
            waiter = self.tasks.get(waiter_id)
            if waiter is None:
                continue
            waiter.waiting_on.discard(task.task_id)
            if not waiter.waiting_on and waiter.after_inputs is not None:
                number, error, rerun = waiter.after_inputs
                waiter.after_inputs = None
                self._inputs_settled(waiter, number, error, rerun)
        if task.released or task.internal:
            self.tasks.pop(task.task_id, None)
            self._let_go.append(task.task_id)

    def _on_Released(self, e: ev.Released) -> None:
        for task_id in e.task_ids:
            task = self.tasks.get(task_id)
            if task is None:  # its event is still on its way (refs travel apart from events)
                self.released_early.setdefault(task_id, self.now)
                continue
            task.released = True
            if task.status != PENDING and task_id not in self.waiters:
                del self.tasks[task_id]
                self._let_go.append(task_id)
        self._forget_stale_releases()

    def _forget_stale_releases(self) -> None:
        """Drop early releases older than ``RELEASED_EARLY_S`` (oldest first: dict order)."""
        horizon = self.now - RELEASED_EARLY_S
        for task_id, at in list(self.released_early.items()):
            if at >= horizon:
                break
            del self.released_early[task_id]

    def _attempt_failed(self, task: Task, attempt: Attempt, error, worker_lost: bool) -> None:
        # An input that was being retried (or backed up) when this attempt started
        # makes it run again on the input's final value, not counted as a retry.
        deps = [(d, self.tasks[d]) for d in task.deps if d in self.tasks]
        pending = {d for d, dep in deps if dep.status == PENDING}
        changed = any(
            dep.status == FINISHED and dep.winner != attempt.inputs.get(d) for d, dep in deps
        )
        if pending:
            self._wait_for_inputs(task, pending, (attempt.number, error, True))
            return
        self._inputs_settled(
            task, attempt.number, error, rerun=changed, lost=worker_lost, address=attempt.pinned
        )

    def _wait_for_inputs(self, task: Task, inputs: set, then: tuple) -> None:
        """Decide ``then`` = (attempt, error, rerun) for ``task`` once ``inputs`` settle."""
        task.waiting_on = set(inputs)
        task.after_inputs = then
        for dep_id in inputs:
            self.waiters.setdefault(dep_id, set()).add(task.task_id)

    def _inputs_settled(self, task, number, error, rerun, lost=False, address=None) -> None:
        if self._failed_input(task) is not None:
            return
        if rerun:
            self._launch(task, number)
        elif task.obj_id is not None:
            self._call_failed(task, error, lost, address)
        else:
            self._apply_retry_policy(task, number, error, lost)

    def _apply_retry_policy(self, task: Task, number: int, error, lost: bool) -> None:
        decision = retry_rules.decide(task.policy, number, error, worker_lost=lost)
        if isinstance(decision, retry_rules.GiveUp):
            if lost:
                error = WorkerLostError(
                    f"task {task.name!r} lost its worker and has no retries left "
                    f"({task.attempts} attempts): {error}"
                )
            self._fail(task, error)
            return
        self.stats.count("retried")
        if decision.delay > 0:
            task.retry_due = self.now + decision.delay
            self._emit(ev.Later(decision.delay, ev.RetryDue(task.task_id, decision.attempt)))
        else:
            self._launch(task, decision.attempt)

    def _on_RetryDue(self, e: ev.RetryDue) -> None:
        task = self.tasks.get(e.task_id)
        if task is not None and task.status == PENDING and not task.live:
            self._launch(task, e.attempt)

    def _on_CancelTask(self, e: ev.CancelTask) -> None:
        task = self.tasks.get(e.task_id)
        if task is not None:
            self._cancel(task, f"task {task.name!r} was cancelled")

    # --- stateful objects -------------------------------------------------------

    def _on_CreateObject(self, e: ev.CreateObject) -> None:
        obj = ObjectState(
            e.obj_id,
            e.name,
            e.label,
            e.request,
            e.strategy,
            e.max_restarts,
            e.reissue_calls,
            avoid=e.avoid,
        )
        self.objects[e.obj_id] = obj
        self._place(obj, creation_id=e.task_id)

    def _place(self, obj: ObjectState, creation_id: str | None = None) -> None:
        """Find ``obj`` a home, or leave it waiting for room (then calls queue)."""
        if creation_id is not None:
            obj.creation = creation_id
        try:
            if not obj.restarts:  # a lost object's new home may still be joining
                self.ledger.check(obj.request)
        except ResourceError as exc:
            self._end(obj, ObjectStartError(f"cannot place {obj.name!r}: {exc}"))
            return
        capacity = self.ledger.capacity
        leaves_some = sum(w in capacity for w in obj.exclude) < len(capacity)
        exclude = obj.exclude if leaves_some else frozenset()
        address = self.ledger.choose(obj.request, obj.strategy, exclude, obj.avoid)
        if address is None:
            obj.unplaced_since = obj.unplaced_since or self.now
            self.unplaced[obj.obj_id] = None
            return
        self.ledger.acquire(obj.obj_id, address, obj.request)
        if obj.request:
            held = {k: -v for k, v in obj.request.items()}
            self._emit(ev.Supply(address, obj.obj_id, held, dict(obj.request)))
        obj.address, obj.unplaced_since, obj.exclude = address, None, frozenset()
        creation_id = creation_id or (obj.creation if obj.creation not in self.tasks else None)
        creation = Task(
            creation_id or self.new_key(f"{obj.label}.__init__"),
            f"{obj.label}.__init__",
            kind="create",
            obj_id=obj.obj_id,
            seq=self._next_seq(obj),
            internal=True,
        )
        self.tasks[creation.task_id] = creation
        obj.creation = creation.task_id
        obj.calls[creation.seq] = creation.task_id
        self._launch(creation, 0, key=creation.task_id)
        queued, obj.queued = obj.queued, []
        for task_id in queued:
            task = self.tasks.get(task_id)
            if task is not None and task.status == PENDING:
                self._send_call(obj, task)

    @staticmethod
    def _next_seq(obj: ObjectState) -> int:
        seq = obj.next_seq
        obj.next_seq += 1
        return seq

    def _on_CallObject(self, e: ev.CallObject) -> None:
        obj = self.objects.get(e.obj_id)
        name = f"{obj.label if obj else e.obj_id}.{e.method}"
        task = self._add(
            Task(
                e.task_id,
                name,
                kind="call",
                deps=e.deps,
                obj_id=e.obj_id,
                method=e.method,
                internal=e.internal,
                direct_call=e.direct_call,
                speculation=e.speculation,
            )
        )
        if not e.internal:
            self.stats.count("submitted")
        if obj is None or obj.gone is not None:
            gone = ObjectStartError(f"stateful worker {e.obj_id!r} was killed")
            self._fail(task, obj.gone if obj else gone)
            return
        if self._failed_input(task) is not None:
            return
        if obj.address is None:
            obj.queued.append(task.task_id)
        else:
            self._send_call(obj, task, key=e.task_id)
        if task.speculation is not None and task.status == PENDING:
            self.spec.live.add(task.task_id)

    def _send_call(self, obj: ObjectState, task: Task, key: str | None = None) -> None:
        task.seq = self._next_seq(obj)
        obj.calls[task.seq] = task.task_id
        self._launch(task, task.attempts, key=key)

    def _on_FormGroup(self, e: ev.FormGroup) -> None:
        for obj_id in e.obj_ids:
            if obj_id in self.objects:
                self.objects[obj_id].group = e.obj_ids

    def _resolve_after_snapshot(self, obj: ObjectState, task: Task, key: str) -> None:
        """Resolve ``task`` once a snapshot taken after it is stored."""
        later = [seq for seq in obj.snapshots if seq > task.seq]
        if later:
            obj.snapshots[min(later)].append((task.task_id, key))
            return
        snap = Task(
            self.new_key(f"{obj.label}.get_state"),
            f"{obj.label}.get_state",
            kind="snapshot",
            obj_id=obj.obj_id,
            method="get_state",
            internal=True,
            direct_call=task.direct_call,
        )
        self.tasks[snap.task_id] = snap
        self._send_call(obj, snap, key=snap.task_id)
        obj.snapshots[snap.seq] = [(task.task_id, key)]

    def _snapshot_stored(self, obj: ObjectState, snap: Task, key: str, value) -> None:
        waiting = obj.snapshots.pop(snap.seq, [])
        if snap.seq > obj.snapshot_seq:
            obj.snapshot, obj.snapshot_seq = value, snap.seq
        self._finish(snap, key)
        for task_id, result_key in waiting:
            task = self.tasks.get(task_id)
            if task is not None:
                self._finish(task, result_key)

    def _call_failed(self, task: Task, error, lost: bool, address: str | None) -> None:
        obj = self.objects.get(task.obj_id)
        if obj is None:
            self._fail(task, error)
            return
        if lost and obj.gone is None:
            self._recover(obj, address or obj.address)
            if task.status == PENDING and not task.live and task.task_id not in obj.queued:
                self._fail(task, WorkerLostError(f"{task.name}: its worker died", address))
            return
        # An error of its own, or its worker died while the object was being killed.
        obj.calls.pop(task.seq, None)
        for waiter_id, result_key in obj.snapshots.pop(task.seq, []):
            waiter = self.tasks.get(waiter_id)  # the call succeeded; only its snapshot did not
            if waiter is not None:
                self._finish(waiter, result_key)
        if task.kind == "destroy":
            self._finish_destroy(obj, task)
            return
        if lost:
            error = WorkerLostError(f"{task.name}: its worker died while it was killed", address)
        self._fail(task, error)

    def _skip(self, task: Task) -> None:
        obj = self.objects.get(task.obj_id)
        if obj is None or obj.address is None or task.seq < 0:
            return
        obj.calls.pop(task.seq, None)
        if obj.address in self.ledger.capacity:
            self._emit(ev.Skip(obj.obj_id, obj.address, (task.seq,)))

    # --- losing workers and moving objects --------------------------------------

    def _recover(self, obj: ObjectState, dead: str | None) -> None:
        """Re-create ``obj`` elsewhere after its worker ``dead`` died.

        Of the calls in flight, those queued behind another call never started
        and are re-issued on the new object. The call that may have been
        running, and calls that ran but whose snapshot died with the worker,
        are re-issued with ``reissue_calls`` and fail otherwise.
        """
        if obj.gone is not None or obj.address is None or (dead and obj.address != dead):
            return  # a late failure from an incarnation that is already replaced
        dead = obj.address
        pending = [self.tasks[t] for _, t in sorted(obj.calls.items()) if t in self.tasks]
        ran_keys = [(t, k) for waiting in obj.snapshots.values() for t, k in waiting]
        ran_keys += [(t.task_id, k) for t, k, _ in obj.held if t.kind == "call"]
        ran = [self.tasks[t] for t, _ in ran_keys if t in self.tasks]
        if ran_keys:  # their results died with the worker
            self._emit(ev.Forget(tuple(k for _, k in ran_keys)))
        held_internal = [t for t, _, _ in obj.held if t.kind != "call"]
        obj.calls.clear()
        obj.snapshots.clear()
        obj.held = []
        obj.address = None
        self.ledger.release(obj.obj_id)
        for task in pending + held_internal:
            if task.kind != "call":  # creations and snapshots of the dead incarnation
                self._fail(task, WorkerLostError(f"{task.name}: worker {dead} died", dead), False)
        user_calls = [t for t in pending if t.kind == "call"]
        maybe_started = user_calls if obj.thread_safe else user_calls[:1]
        if pending and pending[0].kind != "call":
            maybe_started = []  # a snapshot or the creation was the one running
        if obj.restarts >= obj.max_restarts:
            self._end(
                obj,
                WorkerLostError(
                    f"stateful worker {obj.name!r} lost its worker {dead} and has been re-created "
                    f"{obj.restarts} times already (max_restarts)"
                ),
                user_calls + ran,
            )
            return
        obj.restarts += 1
        self.stats.count("objects_recreated")
        restored = "from its last snapshot" if obj.has_state else "afresh from its factory"
        lost = WorkerLostError(
            f"a call to {obj.name!r} was running or had run when its worker {dead} died; the "
            f"object was re-created {restored}. Create it with reissue_calls=True to re-issue "
            "such calls.",
            address=dead,
        )
        again = []
        for task in sorted(ran, key=lambda t: t.seq) + user_calls:
            if task.status != PENDING or task.task_id in again:
                continue
            if (task in ran or task in maybe_started) and not obj.reissue_calls:
                self._fail(task, lost)
                continue
            self._drop_copies(task)
            task.waiting_on, task.after_inputs = set(), None  # it runs once, when re-sent
            again.append(task.task_id)
        obj.queued = again + obj.queued
        obj.exclude = frozenset({dead})
        obj.creation = None
        self._place(obj)

    def _end(self, obj: ObjectState, reason: BaseException, tasks=()) -> None:
        obj.gone = reason
        self.ledger.release(obj.obj_id)
        queued = [self.tasks[t] for t in obj.queued if t in self.tasks]
        obj.queued = []
        for task in list(tasks) + queued:
            self._fail(task, reason)
        creation = self.tasks.get(obj.creation) if obj.creation else None
        if creation is not None:
            self._fail(creation, reason, count=False)
        elif obj.creation is not None:  # never launched: no room was ever found
            self._emit(ev.Fail(obj.creation, reason))

    def _on_KillObject(self, e: ev.KillObject) -> None:
        obj = self.objects.get(e.obj_id)
        task = self._add(
            Task(
                e.task_id,
                f"{obj.label if obj else e.obj_id}.__del__",
                kind="destroy",
                obj_id=e.obj_id,
                internal=True,
            )
        )
        if obj is None or obj.gone is not None:
            self._finish(task, e.task_id)
            return
        obj.gone = ObjectStartError(f"stateful worker {obj.name!r} was killed")
        if obj.address is None:
            self._end(obj, obj.gone)
            self._finish_destroy(obj, task)
            return
        self._send_call(obj, task, key=e.task_id)

    def _lost_while_killed(self, obj: ObjectState) -> None:
        lost = WorkerLostError(f"{obj.name!r} lost its worker {obj.address} while it was killed")
        pending = [self.tasks[t] for _, t in sorted(obj.calls.items()) if t in self.tasks]
        obj.calls.clear()
        for task in pending:
            if task.kind == "destroy":  # done: its attempt will never answer
                self._drop_copies(task)
                self._finish(task, task.current or task.task_id)
            else:
                self._fail(task, lost, count=task.kind == "call")
        self._object_ended(obj)

    def _on_AbandonObject(self, e: ev.AbandonObject) -> None:
        obj = self.objects.get(e.obj_id)
        if obj is not None and obj.gone is not None:
            self._object_ended(obj)

    def _finish_destroy(self, obj: ObjectState, task: Task) -> None:
        self._finish(task, task.current or task.task_id)
        self._object_ended(obj)

    def _object_ended(self, obj: ObjectState) -> None:
        held = self.ledger.release(obj.obj_id)
        if held is not None and obj.request and obj.address in self.ledger.capacity:
            self._emit(ev.Supply(obj.address, obj.obj_id, dict(obj.request), {}))
        self.objects.pop(obj.obj_id, None)
        self._emit(ev.DropObject(obj.obj_id))
        self._place_waiting()

    def _place_waiting(self) -> None:
        for obj in self._waiting_objects():
            self._place(obj)

    def _waiting_objects(self) -> list[ObjectState]:
        """The objects waiting for room, oldest first (read in their number, not in
        that of all objects)."""
        waiting = []
        for obj_id in list(self.unplaced):
            obj = self.objects.get(obj_id)
            if obj is None or obj.gone is not None or obj.address is not None:
                del self.unplaced[obj_id]
            elif obj.unplaced_since is not None:
                waiting.append(obj)
        return waiting

    def _on_WorkersSeen(self, e: ev.WorkersSeen) -> None:
        gone = set(self.ledger.capacity) - set(e.workers)
        if gone:
            self._results_lost(gone)
        for address in gone:
            self.ledger.remove_worker(address)
            self.nthreads.pop(address, None)
            self.load.remove(address)
            self.spec.busy.pop(address, None)
            for key in [k for k, (w, _) in self.spec.running.items() if w == address]:
                del self.spec.running[key]  # their ends will never be reported
                self.spec.detached.discard(key)
                self.spec.losers.pop(key, None)
        for address in gone:
            self._sent_lost(address)
        for address, (nthreads, declared) in e.workers.items():
            self.nthreads[address] = int(nthreads)
            self._load_changed(address)
            self.ledger.add_worker(address, declared)
        self.room_freed = bool(self.room)
        self.ledger.see_others({a: h for a, h in e.held.items() if a in e.workers})
        for obj in list(self.objects.values()):
            if obj.address is None or obj.address in e.workers:
                continue
            if obj.gone is None:
                self._recover(obj, obj.address)
            else:  # being killed: what was sent there will never answer
                self._lost_while_killed(obj)
        self._place_waiting()

    def _results_lost(self, gone: set) -> None:
        """Results pinned to the workers ``gone`` (stateful calls' and pinned copies')
        cannot be computed again (Dask would wait for the worker forever): tasks that
        need them fail now, and later ones at submission."""
        lost = [t for t in self.tasks.values() if t.status == FINISHED and t.held_on in gone]
        for task in lost:
            task.lost = WorkerLostError(
                f"the result of {task.name!r} was lost with its worker {task.held_on}: a "
                "stateful call's result cannot be computed again (use it, or fetch it with "
                ".result(), before the worker can go, or call the object again)",
                address=task.held_on,
            )
        lost_ids = {t.task_id for t in lost}
        for task in list(self.tasks.values()):
            if task.status == PENDING and lost_ids.intersection(task.deps):
                self._failed_input(task)

    def _on_WorkerRemoved(self, e: ev.WorkerRemoved) -> None:
        if not e.expected:
            self.stats.count("workers_lost")
        self.nthreads.pop(e.address, None)  # nothing more is sent there; a refresh tells the rest
        self.silent.discard(e.address)
        self._sent_lost(e.address)
        self.load.remove(e.address)
        self._emit(ev.Refresh())

    def _on_AttemptWaits(self, e: ev.AttemptWaits) -> None:
        attempt = self.attempts.get(e.key)
        if attempt is None or attempt.sent_to is None:
            return
        waiting = self.sent_waiting.setdefault(attempt.sent_to, set())
        if e.waiting:
            waiting.add(e.key)
            self._load_changed(attempt.sent_to)
            self.room_freed = self.room_freed or bool(self.room)
            task = self.tasks.get(attempt.task_id)
            if not attempt.lent and task is not None and task.request:
                # As on the Dask route: from its first wait until it ends, a task's
                # resources are lent to its worker (its children may need them).
                attempt.lent = True
                self._count_request(attempt.sent_to, task.request, -1)
        else:
            waiting.discard(e.key)
            self._load_changed(attempt.sent_to)

    def _busy(self, worker: str) -> int:
        """Direct-route attempts sent to ``worker`` that hold or wait for a slot there
        (not those waiting for other tasks: their slots are lent)."""
        return len(self.sent.get(worker, ())) - len(self.sent_waiting.get(worker, ()))

    def _load_changed(self, worker: str) -> None:
        """``worker``'s count of `_busy` attempts or of threads changed: reorder it."""
        if worker in self.nthreads:
            self.load.set(worker, self._busy(worker), self.nthreads[worker])
        else:
            self.load.remove(worker)

    def _on_StreamLost(self, e: ev.StreamLost) -> None:
        self.unreachable[e.address] = self.now
        self._sent_lost(e.address)
        self._emit(ev.Refresh())
        self._emit(ev.Later(UNREACHABLE_S + 0.05, ev.Tick()))  # then it may be tried again

    def _on_WorkerAdded(self, e: ev.WorkerAdded) -> None:
        self._emit(ev.Refresh())

    def _on_WorkerSilent(self, e: ev.WorkerSilent) -> None:
        """A worker that stopped reporting gets no new work (backups included) until
        it reports again; plain tasks sent there that have not started go elsewhere;
        what it holds or runs is waited for, or backed up."""
        if e.silent and e.address in self.nthreads:
            self.silent.add(e.address)
            self._move_unstarted(e.address, set(e.waiting) | self.sent.get(e.address, set()))
        else:
            self.silent.discard(e.address)
            self.room_freed = True  # it may take waiting tasks again

    def _move_unstarted(self, worker: str, keys: set) -> None:
        """Send again, away from ``worker``, the plain-task attempts among ``keys`` that
        have not started (on Dask's route the engine placed them elsewhere, or its
        work stealing moved them there); not a retry: the attempt keeps its number."""
        for key in sorted(keys):
            attempt = self.attempts.get(key)
            task = self.tasks.get(attempt.task_id) if attempt is not None else None
            if task is None or task.kind != "task" or task.status != PENDING:
                continue
            if attempt.started_at is not None or len(task.live) > 1:
                continue  # it runs there (waited for, or backed up), or has a copy elsewhere
            self._drop_attempt(key)
            task.live.pop(key, None)
            self._emit(ev.Cancel((key,)))
            self.stats.count("moved_from_silent")
            self._launch(task, attempt.number, away_from=worker)

    def _on_SchedulerLost(self, e: ev.SchedulerLost) -> None:
        """Everything in flight is gone (Dask cancelled it): fail it all, end every object."""
        if self.scheduler_lost is not None:
            return
        self.scheduler_lost = SchedulerLostError(e.message)
        for obj in list(self.objects.values()):
            obj.gone = self.scheduler_lost
            self.ledger.release(obj.obj_id)
            self.objects.pop(obj.obj_id)
            self._emit(ev.DropObject(obj.obj_id))
        for task in list(self.tasks.values()):  # calls, queued calls and creations too
            self._fail(task, self.scheduler_lost, count=False)
        self.spec.live.clear()

    def _on_Tick(self, e: ev.Tick) -> None:
        self.room_freed = self.room_freed or bool(self.room)
        if self.tick_at is not None and self.now >= self.tick_at - 1e-3:
            self.tick_at = None  # an earlier tick that a sooner one replaced changes nothing
        for obj in self._waiting_objects():
            waited = self.now - obj.unplaced_since
            if obj.restarts and waited and waited > self.placement_timeout:
                self._end(
                    obj,
                    WorkerLostError(
                        f"stateful worker {obj.name!r} has no worker to run on (waited "
                        f"{waited:.0f} s for room for {{{shown(obj.request)}}}); the workers "
                        f"as this engine saw them:\n{self._ledger_view()}"
                    ),
                )
        if self._needs_sweep() and self.now - self.swept_at >= self.sweep_s:
            self.swept_at = self.now
            self._emit(ev.Refresh())
        if self.spec.live:
            self._plan_backups()

    def _ledger_view(self) -> str:
        """Each worker's room and holders, and the workers not reporting, for errors."""
        names = {obj_id: obj.name for obj_id, obj in self.objects.items()}
        view = self.ledger.describe(names)
        if self.silent:
            view += f"\n  not reporting (given no new work): {', '.join(sorted(self.silent))}"
        return view

    # --- the direct route: plain tasks placed here ------------------------------

    def _place_direct(self, task: Task, away_from: str | None) -> str | None:
        """The worker to send ``task`` to now (see `placement.choose_worker`), or None."""
        near = [
            self.tasks[d].held_on for d in task.deps if d in self.tasks and self.tasks[d].held_on
        ]
        spread = task.speculation or away_from or self.silent
        skip = self._unhealthy_workers(away_from) if spread else set()
        for worker, since in list(self.unreachable.items()):
            if self.now - since > UNREACHABLE_S or worker not in self.nthreads:
                del self.unreachable[worker]
        skip |= set(self.unreachable)
        depth = pipeline_depth(self.mean_s.get(task.name))
        if not task.request:
            return self.load.choose(depth, near, skip)
        return choose_worker(
            self.nthreads,
            {w: self._busy(w) for w in self.sent},
            task.request,
            {w: self._free_for_tasks(w) for w in self.nthreads},
            near=near,
            only=[w for w in self.nthreads if w not in skip],
            since=self.load.since(),
            depth=depth,
        )

    def _direct_inputs(self, task: Task) -> bool:
        """Whether every input of ``task`` is one a task sent on the direct route can
        take: a direct-route result (here or kept on a worker) or a put (its value goes
        on the stream once)."""
        return all(
            d in self.tasks
            and (
                self.tasks[d].kind == "put"
                or (self.tasks[d].kind == "task" and self.tasks[d].route == "direct")
            )
            for d in task.deps
        )

    def _free_for_tasks(self, worker: str) -> dict:
        free = self.ledger.free(worker)
        for name, amount in self.sent_requests.get(worker, {}).items():
            free[name] = free.get(name, 0.0) - amount
        return free

    def _count_sent(self, key: str, worker: str, request: dict, sign: int) -> None:
        keys = self.sent.setdefault(worker, set())
        (keys.add if sign > 0 else keys.discard)(key)
        if sign < 0:
            self.sent_waiting.get(worker, set()).discard(key)
        self._load_changed(worker)
        self._count_request(worker, request, sign)

    def _count_request(self, worker: str, request: dict, sign: int) -> None:
        if request:
            held = self.sent_requests.setdefault(worker, {})
            for name, amount in request.items():
                held[name] = held.get(name, 0.0) + sign * amount

    def _unsend(self, attempt: Attempt) -> None:
        """A direct-route attempt ended or was dropped: its slot is free again."""
        if attempt.sent_to is None or attempt.key not in self.sent.get(attempt.sent_to, ()):
            return
        task = self.tasks.get(attempt.task_id)
        request = task.request if task is not None and not attempt.lent else {}
        self._count_sent(attempt.key, attempt.sent_to, request, -1)
        self.room_freed = self.room_freed or bool(self.room)

    def _sent_lost(self, worker: str) -> None:
        """The direct-route attempts sent to ``worker`` end: it is gone."""
        for key in sorted(self.sent.get(worker, ())):
            self._on_AttemptDone(
                ev.AttemptDone(
                    key,
                    "error",
                    WorkerLostError(
                        f"lost worker {worker} while a task sent to it was in flight",
                        address=worker,
                    ),
                    worker_lost=True,
                )
            )
        self.sent.pop(worker, None)
        self.sent_requests.pop(worker, None)
        self.sent_waiting.pop(worker, None)
        self._load_changed(worker)

    def _place_room(self) -> None:
        """Send tasks waiting for a slot, first come first served, while slots are free
        (one whose resources are taken everywhere keeps its place; those behind it go)."""
        self.room_freed = False
        kept: collections.deque = collections.deque()
        while self.room and self._any_room():
            task = self.tasks.get(self.room.popleft())
            if task is None or task.status != PENDING or task.room_wait is None:
                continue  # done meanwhile (cancelled, failed): skipped
            number, key, away_from = task.room_wait
            worker = self._place_direct(task, away_from)
            if worker is None:
                kept.append(task.task_id)
                if not task.request:  # the workers are full for it: first come, first served
                    break
                continue  # its resources are taken: those behind it may fit
            task.room_wait = None
            self._launch(task, number, key=key, away_from=away_from, placed_on=worker)
        self.room.extendleft(reversed(kept))

    def _any_room(self) -> bool:
        # The deepest pipeline: a task of a shallower one finds no room and keeps its place.
        return self.load.choose(MAX_PIPELINE) is not None

    # --- speculation ------------------------------------------------------------

    def _on_Started(self, e: ev.Started) -> None:
        at = self.now - e.age
        spec = self.spec
        spec.running[e.key] = (e.worker, at)
        attempt = self.attempts.get(e.key)
        if attempt is not None:
            attempt.worker, attempt.started_at = e.worker, at
        if spec.reserved.pop(e.key, None) is None:  # a backup's slot was taken at launch
            spec.busy[e.worker] = spec.busy.get(e.worker, 0) + 1

    def _on_Ended(self, e: ev.Ended) -> None:
        at = self.now - e.age
        spec = self.spec
        self.stats.record_duration(e.name, e.elapsed)
        mean = self.mean_s.get(e.name)
        remember(self.mean_s, e.name, e.elapsed if mean is None else 0.9 * mean + 0.1 * e.elapsed)
        if spec.running.pop(e.key, None) is not None:
            if e.key in spec.detached:
                spec.detached.discard(e.key)
            else:
                spec.busy[e.worker] = max(0, spec.busy.get(e.worker, 0) - 1)
        won_at = spec.losers.pop(e.key, None)
        if won_at is None and (spec.live or spec.speed.slow_until):
            spec.speed.record(e.worker, e.elapsed, self._typical(e.name), at)
        if won_at is not None and at > won_at:
            self.stats.count("time_saved_s", at - won_at)

    def _typical(self, name: str) -> float | None:
        window = self.stats.durations.get(name)
        return None if window is None else window.quantile(0.5)

    def _healthy_workers(self, also_avoid: str | None = None) -> tuple[str, ...] | None:
        """Where new speculative work goes (None: anywhere): the workers less
        `_unhealthy_workers`."""
        skip = self._unhealthy_workers(also_avoid)
        return tuple(sorted(set(self.nthreads) - skip)) if skip else None

    def _unhealthy_workers(self, also_avoid: str | None = None) -> set[str]:
        """Where new speculative work does not go: workers known to be slow or silent
        (and ``also_avoid``), unless that leaves none; then, if only the worker to avoid
        is left, the silent ones. Read in the size of those, not of every worker."""
        avoid = self._avoided() | ({also_avoid} if also_avoid else set())
        if self._leaves_some(avoid):
            return avoid
        if also_avoid and self._leaves_some(self.silent):
            return set(self.silent)
        return set()

    def _leaves_some(self, workers: set[str]) -> bool:
        """Whether some live worker is not among ``workers``."""
        return sum(w in self.nthreads for w in workers) < len(self.nthreads)

    def _avoided(self) -> set[str]:
        """Workers that get no new speculative work: those that stopped reporting, and
        those known to be slow unless that would leave none (slow is a preference;
        silent is not: work sent to a frozen worker waits for it to run again)."""
        slow = self.spec.speed.slow(self.now)
        if self._leaves_some(slow | self.silent):
            return slow | self.silent
        return set(self.silent)

    def _speculation_finished(self, task: Task, winner: str, losers: list, by_backup: bool) -> None:
        backup_won = by_backup or winner in task.backups
        self.stats.count("backup_won" if backup_won else "original_won")
        typical = self._typical(task.name) if backup_won else None
        spec = self.spec
        for key in losers:
            if key not in spec.running or key in spec.detached:
                continue  # never started: no end will be reported
            if backup_won:
                spec.losers[key] = self.now  # for time_saved_s, when the loser ends
            worker, started = spec.running[key]
            # The cancelled copy leaves its worker's pool (the worker runtime's detach):
            # it runs on to its end, ignored, but no longer takes a thread.
            spec.detached.add(key)
            spec.busy[worker] = max(0, spec.busy.get(worker, 0) - 1)
            if backup_won:  # losing to a backup says something of the worker
                spec.speed.record(worker, self.now - started, typical, self.now)

    def _plan_backups(self) -> None:
        views, by_id = [], {}
        for task_id in list(self.spec.live):
            task = self.tasks.get(task_id)
            if task is None or task.status != PENDING:
                self.spec.live.discard(task_id)
                continue
            view = self._spec_view(task)
            if view is not None:
                views.append(view)
                by_id[task_id] = task
        if not views:
            return
        names = {v.name for v in views}
        windows = self.stats.durations
        durations = {n: list(windows[n].values) for n in names if n in windows}
        spec = self.spec
        free = {w: n - spec.busy.get(w, 0) for w, n in self.nthreads.items()}
        busy_since: dict[str, float] = {}
        for key, (worker, started) in spec.running.items():
            if key not in spec.detached:
                busy_since[worker] = min(started, busy_since.get(worker, started))
        slow = self._avoided()
        for backup in plan_backups(self.now, views, durations, free, slow, busy_since):
            self._launch_backup(by_id[backup.task_id], backup.worker)

    def _spec_view(self, task: Task) -> SpecTask | None:
        keys = dict(task.live)
        for peer_id in task.linked:
            peer = self.tasks.get(peer_id)
            if peer is not None:
                keys.update(peer.live)
        if not keys:
            return None
        copies = tuple(
            Copy(*self.spec.running.get(key, (None, None)), submitted_at=sent)
            for key, sent in keys.items()
        )
        allowed = None
        if task.obj_id is not None:
            allowed = frozenset(p.address for p in self._idle_peers(task))
            if not allowed:
                return None
        return SpecTask(task.task_id, task.name, copies, task.speculation, allowed)

    def _idle_peers(self, task: Task) -> list[ObjectState]:
        obj = self.objects.get(task.obj_id)
        if obj is None:
            return []
        peers = [self.objects.get(p) for p in obj.group if p != obj.obj_id]
        return [
            p
            for p in peers
            if p is not None
            and p.gone is None
            and p.address is not None
            and p.address != obj.address
            and not p.calls
            and not p.queued
        ]

    def _launch_backup(self, task: Task, worker: str) -> None:
        self.stats.count("speculated")
        if task.obj_id is None:
            number = max(
                (self.attempts[k].number for k in task.live if k in self.attempts), default=0
            )
            self._launch(task, number, backup_on=worker)
            return
        peer = next((p for p in self._idle_peers(task) if p.address == worker), None)
        if peer is None:
            return
        backup = Task(
            self.new_key(f"{peer.label}.{task.method}"),
            f"{peer.label}.{task.method}",
            kind="call",
            deps=task.deps,
            obj_id=peer.obj_id,
            method=task.method,
            internal=True,
            direct_call=task.direct_call,
            backup_of=task.task_id,
        )
        self.tasks[backup.task_id] = backup
        task.linked.append(backup.task_id)
        self._send_call(peer, backup, key=backup.task_id)
        task.backups.add(backup.task_id)
        self.spec.reserved[backup.task_id] = worker
        self.spec.busy[worker] = self.spec.busy.get(worker, 0) + 1

    # --- reading ----------------------------------------------------------------

    def view(self) -> dict:
        """What runs where now, for a person to look at (the engine's live page): per
        worker the attempts in flight there (started, or sent on the direct route),
        per task name how many are in flight, finished and failed, and the objects."""
        workers: dict[str, list] = {w: [] for w in sorted(self.nthreads)}
        in_flight: dict[str, int] = {}
        for key, attempt in self.attempts.items():
            task = self.tasks.get(attempt.task_id)
            if task is None or task.internal:
                continue
            in_flight[task.name] = in_flight.get(task.name, 0) + 1
            where = attempt.worker or attempt.sent_to or attempt.pinned
            if where is None:
                continue
            since = attempt.started_at if attempt.started_at is not None else task.live.get(key)
            age = None if since is None else round(self.now - since, 3)
            workers.setdefault(where, []).append(
                {
                    "name": task.name,
                    "key": key,
                    "started": attempt.started_at is not None,
                    "age_s": age,
                    "route": task.route,
                }
            )
        names = sorted(set(in_flight) | set(self.tally))
        return {
            "workers": {
                w: {"threads": self.nthreads.get(w), "tasks": t} for w, t in workers.items()
            },
            "by_name": {
                n: {
                    "in_flight": in_flight.get(n, 0),
                    "finished": self.tally.get(n, [0, 0])[0],
                    "failed": self.tally.get(n, [0, 0])[1],
                }
                for n in names
            },
            "waiting_for_a_slot": len(self.room),
            "objects": [
                {
                    "name": o.name,
                    "address": o.address,
                    "alive": o.gone is None,
                    "restarts": o.restarts,
                }
                for o in self.objects.values()
            ],
        }

    def slow_workers(self) -> set[str]:
        return set(self.spec.speed.slow_until)
