"""What goes into the engine's state machine and what comes out of it.

Events are what happened or what a user asked for; instructions are what the
backend must do about it. Both are plain frozen data. The state machine
(:mod:`~hrl_tasks.scheduler.state`) turns events into instructions with no I/O;
a backend (:mod:`~hrl_tasks.scheduler.backend` on Dask,
:mod:`~hrl_tasks.scheduler.sync` in-process) turns instructions into work and
the outcomes of that work back into events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.speculation import SpeculationPolicy

# --- events: user requests -----------------------------------------------------


@dataclass(frozen=True)
class SubmitTask:
    """Run a plain task; ``task_id`` is also its first attempt's key."""

    task_id: str
    name: str
    deps: tuple[str, ...] = ()
    request: dict = field(default_factory=dict)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    speculation: SpeculationPolicy | None = None
    route: str = "dask"  # "direct": the engine places it and sends it to the worker itself


@dataclass(frozen=True)
class PutValue:
    """A value placed in the cluster under ``task_id`` (already there: it is finished)."""

    task_id: str


@dataclass(frozen=True)
class CreateObject:
    """Place and build a stateful object; ``task_id`` is its first creation."""

    obj_id: str
    task_id: str
    name: str
    label: str
    request: dict = field(default_factory=dict)
    strategy: str = "spread"
    max_restarts: int = 3
    reissue_calls: bool = False
    avoid: frozenset = frozenset()  # workers to use only when no other has room


@dataclass(frozen=True)
class CallObject:
    """Call ``method`` of object ``obj_id``, after every call made before."""

    task_id: str
    obj_id: str
    method: str
    deps: tuple[str, ...] = ()
    internal: bool = False
    direct_call: bool = False
    speculation: SpeculationPolicy | None = None


@dataclass(frozen=True)
class FormGroup:
    """Objects that are equivalent: a speculative call may be backed up on a peer."""

    obj_ids: tuple[str, ...]


@dataclass(frozen=True)
class KillObject:
    """End object ``obj_id`` after the calls made before; ``task_id`` is the destruction."""

    obj_id: str
    task_id: str


@dataclass(frozen=True)
class AbandonObject:
    """A killed object did not end in time: stop waiting and free what it holds."""

    obj_id: str


@dataclass(frozen=True)
class CancelTask:
    task_id: str


@dataclass(frozen=True)
class ResultLost:
    """The result of finished plain task ``task_id`` (attempt ``key``'s) was lost
    before it was read, and Dask cannot compute it again (what it was computed from
    died too), or it is held by a worker that stopped reporting (``away_from``): run
    the task again, elsewhere than ``away_from``. The engine has given it a new
    outcome and payload."""

    task_id: str
    key: str
    away_from: str | None = None


@dataclass(frozen=True)
class Released:
    """Nobody holds these tasks' refs any more: forget them once they are done."""

    task_ids: tuple[str, ...]


# --- events: the cluster and the workers ----------------------------------------


@dataclass(frozen=True)
class AttemptDone:
    """An attempt ended: ``status`` is ``"finished"``, ``"error"`` or ``"cancelled"``.

    ``worker_lost``: it failed because its worker died (or could not be reached).
    ``value``: the result, for attempts launched with ``fetch=True``.
    """

    key: str
    status: str
    error: BaseException | None = None
    worker_lost: bool = False
    value: Any = None


@dataclass(frozen=True)
class Started:
    """A worker reports that attempt ``key`` started executing ``age`` seconds before now."""

    key: str
    worker: str
    age: float = 0.0


@dataclass(frozen=True)
class Ended:
    """A worker reports that attempt ``key`` ended after ``elapsed`` seconds of execution."""

    key: str
    name: str
    worker: str
    elapsed: float
    age: float = 0.0


@dataclass(frozen=True)
class WorkersSeen:
    """The workers there are now: address -> (threads, resources declared); and
    what every engine holds on them: address -> holder -> request."""

    workers: dict
    held: dict = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerRemoved:
    """The scheduler lost a worker (``expected``: it was retired on purpose)."""

    address: str
    expected: bool = False


@dataclass(frozen=True)
class AttemptWaits:
    """Direct-route attempt ``key`` waits for other tasks (``waiting``), its worker slot
    lent to them, or goes on again: a waiting attempt does not count as busy."""

    key: str
    waiting: bool


@dataclass(frozen=True)
class StreamLost:
    """The engine's task stream to worker ``address`` broke: the worker died, or cannot
    be reached. What was sent on it is lost."""

    address: str


@dataclass(frozen=True)
class WorkerAdded:
    address: str


@dataclass(frozen=True)
class WorkerSilent:
    """Worker ``address`` stopped reporting to the scheduler (``silent``: a frozen or
    swapping process, which still accepts connections and answers none), or reports
    again (not ``silent``). ``waiting``: the keys of Dask's tasks placed there (work
    stealing moves tasks to an idle worker, a frozen one too)."""

    address: str
    silent: bool = True
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True)
class InputsLost:
    """Dask cancelled attempt ``key`` itself: data it needed is gone. ``lost``: the
    values put with ``engine.put`` that the backend found gone (their holder died)."""

    key: str
    lost: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerLost:
    """The client lost the scheduler: every future it had is cancelled."""

    message: str


@dataclass(frozen=True)
class Tick:
    """Time passed: speculation, sweeps and waiting placements get a look."""


@dataclass(frozen=True)
class RetryDue:
    """The back-off before attempt ``attempt`` of ``task_id`` is over."""

    task_id: str
    attempt: int


# --- instructions ---------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """Start an attempt under ``key``.

    ``kind`` is ``task`` (the user's function), ``create``, ``call``,
    ``snapshot`` or ``destroy`` (of object ``obj_id`` as call number ``seq``).
    ``inputs`` maps each dependency's task id to the key whose result to use.
    ``workers``: run there; only there if ``strict`` (a stateful object's calls),
    else Dask runs it elsewhere once none of them is left (a result lost with
    its worker is computed again on another, never waits for one that died).
    ``fetch``: report the result's value in
    :class:`AttemptDone` (creations and snapshots). ``state``: the snapshot a
    creation restores. ``watched``: speculation follows this attempt, so its
    start must be reported (a direct call that is not watched reports its
    time in its reply only). ``direct_call``: a call of a stateful object sent
    as one message on the engine's stream to its worker (``handle.call(...,
    direct=True)``), not a Dask task. ``route``: ``"direct"`` for a plain task the
    engine placed itself, sent on its stream to ``workers[0]`` (the public name of
    the engine's own route; a different thing from a direct call).
    """

    key: str
    task_id: str
    name: str
    attempt: int
    kind: str = "task"
    workers: tuple[str, ...] | None = None
    strict: bool = False
    priority: int = 0
    inputs: dict = field(default_factory=dict)
    request: dict = field(default_factory=dict)
    internal: bool = False
    direct_call: bool = False
    fetch: bool = False
    obj_id: str | None = None
    seq: int = -1
    method: str | None = None
    state: Any = None
    args_of: str | None = None  # the task whose arguments to use (a backup call's original)
    watched: bool = False
    route: str = "dask"  # "direct": send to ``workers[0]`` on the engine's own stream


@dataclass(frozen=True)
class Cancel:
    """Drop these attempts; a running one runs on, ignored."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Resolve:
    """Task ``task_id`` succeeded with the result of attempt ``key``."""

    task_id: str
    key: str


@dataclass(frozen=True)
class Fail:
    task_id: str
    error: BaseException


@dataclass(frozen=True)
class Resend:
    """Put the value of put ``task_id`` in the cluster again, under ``key``."""

    task_id: str
    key: str


@dataclass(frozen=True)
class Forget:
    """The backend may drop what it holds for these attempts."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Skip:
    """Tell worker ``address`` that calls ``seqs`` of ``obj_id`` will never run."""

    obj_id: str
    address: str
    seqs: tuple[int, ...]


@dataclass(frozen=True)
class Supply:
    """Object ``obj_id`` takes (``held`` non-empty) or gives back resources on ``address``:
    change what the worker advertises by ``delta``."""

    address: str
    obj_id: str
    delta: dict
    held: dict


@dataclass(frozen=True)
class DropObject:
    """Object ``obj_id`` has ended: the backend may drop its factory and arguments."""

    obj_id: str


@dataclass(frozen=True)
class Refresh:
    """Read the workers from the scheduler and report them as :class:`WorkersSeen`."""


@dataclass(frozen=True)
class Later:
    """Feed ``event`` back after ``delay`` seconds."""

    delay: float
    event: Any
