"""The worker's half of the task stream as a state machine: what one engine's stream
holds on a worker, advanced by events, with no threads, sockets or clocks.

:class:`StreamState` is to a ``task_service.TaskStream`` what
:class:`~hrl_tasks.scheduler.state.EngineState` is to the driver's backend, and
what distributed's ``WorkerState`` is to its ``Worker``: the stream's event loop
and its runner threads feed it events (a message arrived, a runner wants the next
task, a task's answer was posted, the stream ended) and carry out the
instructions it returns (send an answer, start a runner, detach a running task,
drop a kept result). Every decision of the worker's half is here: what a cancel
does to a queued, fetching or running task, which answers go out, how many
runners hold slots, what a stream's end lets go. How tasks run (threads, slots
shared by every stream and route, the pool) stays in ``task_service``.

The caller serialises ``handle`` (the stream's lock): events come from the event
loop and from runner threads. ``validate()`` checks the rules below after every
``handle`` when ``HRL_TASKS_VALIDATE=1`` (as the driver's state does):

- the tasks queued, fetching their inputs and taken by a runner are three
  disjoint sets; a cancelled key is one fetching or taken (a queued one is
  dropped at once, one answered is forgotten);
- the runners holding slots are never fewer than none;
- an ended stream queues nothing and starts nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# --- events ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """``("run", key, spec, fn_id, args, kwargs)`` arrived."""

    key: str
    spec: dict
    fn_id: int
    args: tuple
    kwargs: dict


@dataclass(frozen=True, slots=True)
class FunctionSent:
    """``("fn", fn_id, fn)``: tasks name ``fn`` by ``fn_id`` from now on."""

    fn_id: int
    fn: Any


@dataclass(frozen=True, slots=True)
class FunctionForgotten:
    """``("forget-fn", fn_id)``: no task names it any more."""

    fn_id: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """``("cancel", key)`` arrived."""

    key: str


@dataclass(frozen=True, slots=True)
class DirectCall:
    """``("call", key, spec, call)``: a direct call to a stateful object living here."""

    key: str
    spec: dict
    call: tuple


@dataclass(frozen=True, slots=True)
class Detached:
    """A cancelled running task gave its slot back at once (it runs on, uncounted)."""

    key: str


@dataclass(frozen=True, slots=True)
class ValueSent:
    """``("value", key, value)``: a put's value, kept for this stream's tasks."""

    key: str
    value: Any


@dataclass(frozen=True, slots=True)
class Release:
    """``("release", key)``: a kept result or put value is not needed any more."""

    key: str


@dataclass(frozen=True, slots=True)
class InputsFetched:
    """A task's kept inputs arrived: ``args`` and ``kwargs`` hold their values."""

    key: str
    spec: dict
    fn: Any
    args: tuple
    kwargs: dict


@dataclass(frozen=True, slots=True)
class InputLost:
    """A task's kept input could not be had (``why``): it does not run."""

    key: str
    why: str


@dataclass(frozen=True, slots=True)
class SlotTaken:
    """A slot was taken for this stream (after :meth:`StreamState.wants_runner`)."""


@dataclass(frozen=True, slots=True)
class Take:
    """A runner holding a slot asks for the next queued task."""


@dataclass(frozen=True, slots=True)
class RunnerEnded:
    """A runner stopped taking tasks; ``holds``: it still held its slot."""

    holds: bool


@dataclass(frozen=True, slots=True)
class Waits:
    """A running task lends its slot to wait for others (``waiting``) or goes on."""

    key: str
    waiting: bool


@dataclass(frozen=True, slots=True)
class ResultKept:
    """A task's result stays here under ``key`` (a large one), its size answered."""

    key: str


@dataclass(frozen=True, slots=True)
class Posted:
    """A task's message from its thread reached the event loop: ``("done", key,
    status, value, elapsed)``, ``("started", key, ...)``, ``("waiting", ...)``..."""

    out: tuple


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The engine's stream closed: its engine is gone (or closed it)."""


# --- instructions --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``message`` to the engine; ``at_once``: wake the writer now (answers
    posted in a batch wake it once, after the batch)."""

    message: tuple
    at_once: bool = True


@dataclass(frozen=True, slots=True)
class Note:
    """An entry of ``key``'s story on this worker."""

    key: str
    what: str


@dataclass(frozen=True, slots=True)
class Fetch:
    """Fetch the task's kept inputs, then tell :class:`InputsFetched` or :class:`InputLost`."""

    key: str
    spec: dict
    fn: Any
    args: tuple
    kwargs: dict


@dataclass(frozen=True, slots=True)
class StartRunner:
    """Start a runner in the pool on the slot just taken."""


@dataclass(frozen=True, slots=True)
class StartCall:
    """Run a direct call in its object's threads (not in a slot); its answer is posted
    as a task's."""

    key: str
    spec: dict
    call: tuple


@dataclass(frozen=True, slots=True)
class RunTask:
    """The runner that asked runs this task next, holding its slot."""

    key: str
    spec: dict
    fn: Any
    args: tuple
    kwargs: dict


@dataclass(frozen=True, slots=True)
class Detach:
    """Give a cancelled running task's slot to the next task (tell :class:`Detached`
    if it was given: not if it had ended or lent its slot to wait)."""

    key: str


@dataclass(frozen=True, slots=True)
class ReleaseSlot:
    """The ended runner's slot goes back to the worker."""


@dataclass(frozen=True, slots=True)
class LookAgain:
    """Tasks wait and a slot may be free: look for one (on the event loop)."""


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep ``value`` on this worker under ``key`` (a put's value)."""

    key: str
    value: Any


@dataclass(frozen=True, slots=True)
class Drop:
    """Let go of what is kept on this worker under ``key``."""

    key: str


@dataclass(frozen=True, slots=True)
class DropLater:
    """Let go of the results kept under ``keys`` after a grace period (peers and a
    reconnecting engine may still ask for them), unless released before."""

    keys: frozenset


class InvalidStreamState(AssertionError):
    """The worker's stream state broke one of its rules (a bug in the engine)."""


class StreamState:
    """One engine's stream on one worker, as data: see the module's docstring."""

    def __init__(self, validate: bool = False):
        self.validating = validate
        self.functions: dict[int, Any] = {}  # fn_id -> function (the engine bounds them)
        self.queued: OrderedDict[str, tuple] = OrderedDict()  # key -> (spec, fn, args, kwargs)
        self.fetching: set[str] = set()  # waiting for kept inputs, not queued yet
        self.active: set[str] = set()  # taken by a runner, until its answer is posted
        self.cancelled: set[str] = set()  # fetching or active: their answers go unsent
        self.results: set[str] = set()  # results this stream's tasks kept here
        self.puts: set[str] = set()  # put values this stream's engine sent
        self.runners = 0  # runners holding slots for this stream
        self.closed = False

    def handle(self, *events) -> list:
        """Advance by ``events`` (in order); the instructions, in order."""
        out: list = []
        for event in events:
            getattr(self, f"_on_{type(event).__name__}")(event, out)
        if self.validating:
            self.validate()
        return out

    def wants_runner(self) -> bool:
        """Whether another runner would find a task waiting for it."""
        return not self.closed and len(self.queued) > self.runners

    def problems(self) -> list[str]:
        """The rules broken now (the module's docstring), one line each."""
        found = []
        queued = set(self.queued)
        for a, b, name in (
            (queued, self.fetching, "queued and fetching"),
            (queued, self.active, "queued and taken by a runner"),
            (self.fetching, self.active, "fetching and taken by a runner"),
        ):
            found += [f"{key}: {name} at once" for key in sorted(a & b)]
        found += [
            f"{key}: cancelled but neither fetching nor taken by a runner"
            for key in sorted(self.cancelled - self.fetching - self.active)
        ]
        if self.runners < 0:
            found.append(f"{self.runners} runners hold slots")
        if self.closed and self.queued:
            found.append(f"the stream ended with {len(self.queued)} tasks queued")
        return found

    def validate(self) -> None:
        """Raise :class:`InvalidStreamState` naming every broken rule."""
        found = self.problems()
        if found:
            raise InvalidStreamState("; ".join(found))

    # --- messages from the engine ---------------------------------------------------

    def _on_Run(self, e: Run, out: list) -> None:
        fn = self.functions.get(e.fn_id)
        if fn is None:  # it did not pickle in the engine, which fails the task itself
            out.append(Note(e.key, f"received: no function {e.fn_id}, answered error"))
            error = LookupError(f"no function {e.fn_id}")
            out.append(Send(("done", e.key, "error", error, None)))
        elif has_kept((e.args, e.kwargs)):  # queued once its inputs are here
            out.append(Note(e.key, "received; fetching its kept inputs"))
            self.fetching.add(e.key)
            out.append(Fetch(e.key, e.spec, fn, e.args, e.kwargs))
        else:
            out.append(Note(e.key, "received; queued for a slot"))
            self.queued[e.key] = (e.spec, fn, e.args, e.kwargs)

    def _on_FunctionSent(self, e: FunctionSent, out: list) -> None:
        self.functions[e.fn_id] = e.fn

    def _on_FunctionForgotten(self, e: FunctionForgotten, out: list) -> None:
        self.functions.pop(e.fn_id, None)

    def _on_Cancel(self, e: Cancel, out: list) -> None:
        if self.queued.pop(e.key, None) is not None:
            out.append(Note(e.key, "cancelled before it started"))
            out.append(Send(("done", e.key, "cancelled", None, None)))
        elif e.key in self.cancelled:  # told again: already done
            return
        elif e.key in self.active or e.key in self.fetching:  # else its answer has left
            out.append(Note(e.key, "cancelled while it ran: its slot goes on"))
            self.cancelled.add(e.key)
            if e.key in self.active:
                out.append(Detach(e.key))

    def _on_DirectCall(self, e: DirectCall, out: list) -> None:
        out.append(Note(e.key, "direct call received"))
        out.append(StartCall(e.key, e.spec, e.call))

    def _on_Detached(self, e: Detached, out: list) -> None:
        self.runners -= 1  # it ends without a slot: the freed one takes the next task

    def _on_ValueSent(self, e: ValueSent, out: list) -> None:
        self.puts.add(e.key)
        out.append(Keep(e.key, e.value))

    def _on_Release(self, e: Release, out: list) -> None:
        if e.key in self.results:
            out.append(Note(e.key, "its kept result released"))
        self.puts.discard(e.key)
        self.results.discard(e.key)
        out.append(Drop(e.key))

    # --- the stream's own work ------------------------------------------------------

    def _on_InputsFetched(self, e: InputsFetched, out: list) -> None:
        self.fetching.discard(e.key)
        if e.key in self.cancelled:
            self.cancelled.discard(e.key)
            out.append(Send(("done", e.key, "cancelled", None, None)))
        elif self.closed:
            out.append(Note(e.key, "inputs fetched after its engine's stream ended: not run"))
        else:
            out.append(Note(e.key, "inputs fetched; queued for a slot"))
            self.queued[e.key] = (e.spec, e.fn, e.args, e.kwargs)

    def _on_InputLost(self, e: InputLost, out: list) -> None:
        self.fetching.discard(e.key)
        self.cancelled.discard(e.key)
        out.append(Note(e.key, f"an input could not be fetched ({e.why}): not run"))
        out.append(Send(("done", e.key, "input-lost", e.why, None)))

    def _on_SlotTaken(self, e: SlotTaken, out: list) -> None:
        self.runners += 1
        out.append(StartRunner())

    def _on_Take(self, e: Take, out: list) -> None:
        if self.closed or not self.queued:
            return
        key, (spec, fn, args, kwargs) = self.queued.popitem(last=False)
        self.active.add(key)
        out.append(RunTask(key, spec, fn, args, kwargs))

    def _on_RunnerEnded(self, e: RunnerEnded, out: list) -> None:
        if e.holds:
            self.runners -= 1
            out.append(ReleaseSlot())
        elif self.queued and not self.closed:  # its slot went elsewhere: look again
            out.append(LookAgain())

    def _on_Waits(self, e: Waits, out: list) -> None:
        self.runners += -1 if e.waiting else 1  # a waiting task's runner does not count
        what = (
            "waits for other tasks, its slot lent" if e.waiting else "goes on, a slot taken again"
        )
        out.append(Note(e.key, what))

    def _on_ResultKept(self, e: ResultKept, out: list) -> None:
        if self.closed:  # nobody was or will be told of it
            out.append(Drop(e.key))
        else:
            self.results.add(e.key)

    def _on_Posted(self, e: Posted, out: list) -> None:
        message = e.out
        key = message[1]
        done = message[0] == "done"
        if done:
            self.active.discard(key)
            out.append(Note(key, answered(message, key in self.cancelled)))
        if key in self.cancelled:
            if done:
                self.cancelled.discard(key)
                if message[2] == "kept":  # nobody will ask for it
                    self.results.discard(key)
                    out.append(Drop(key))
            return
        out.append(Send(message, at_once=False))

    def _on_StreamEnded(self, e: StreamEnded, out: list) -> None:
        self.closed = True
        for key in self.queued:
            out.append(Note(key, "dropped unstarted: its engine's stream ended"))
        self.queued.clear()
        out += [Drop(key) for key in sorted(self.puts)]  # the engine's puts go with it
        self.puts.clear()
        if self.results:  # its results, after a grace
            out.append(DropLater(frozenset(self.results)))
            self.results.clear()


def answered(out: tuple, cancelled: bool) -> str:
    """A story's words for a task's ``("done", key, status, value, elapsed)``."""
    _, _, status, value, elapsed = out
    took = "" if elapsed is None else f" after {elapsed:.3f} s"
    if cancelled:
        return f"ended{took}, cancelled before: no answer sent"
    if status == "kept":
        return f"ended{took}; its result ({value:,} B) kept here, its size answered"
    if status == "error":
        return f"ended{took} with {type(value).__name__}; answered"
    return f"ended{took}; answered {status}"


@dataclass(frozen=True)
class KeptInput:
    """An input kept on worker ``address`` under ``key`` (a large direct-route result):
    the worker running the task fetches it (or finds it among its own)."""

    key: str
    address: str


def has_kept(obj) -> bool:
    """Whether ``obj`` names a :class:`KeptInput` anywhere in its lists, tuples, sets
    and dicts."""
    if isinstance(obj, KeptInput):
        return True
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(has_kept(x) for x in obj)
    if isinstance(obj, dict):
        return any(has_kept(v) for v in obj.values())
    return False
