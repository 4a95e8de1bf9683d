"""Stateful workers: objects living in a worker process, called through pinned tasks.

Unlike Dask actors, each call is an ordinary task: a real future that can be
waited on with other TaskRefs, passed to other tasks as a dependency, and seen
in the dashboard. The driver numbers the calls of each object so they run in
order (see :mod:`~hrl_tasks.scheduler.worker_side`).

Recovery: when the object's worker dies, the object is built again on
another worker from its factory and, if it has ``get_state()`` /
``restore_state(state)``, restored from its last snapshot. Snapshots are taken
after calls, as the next call in the object's order, and a call's TaskRef
resolves only once a snapshot taken after it is stored on the driver: a
result you hold is never lost. Calls in flight at the death are re-issued if
the handle was created with ``reissue_calls=True``, and fail with
:class:`~hrl_tasks.scheduler.errors.WorkerLostError` otherwise.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distributed import fire_and_forget
from distributed.scheduler import KilledWorker

from hrl_tasks.scheduler.direct import direct_arguments
from hrl_tasks.scheduler.direct import send as send_direct
from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.taskref import TaskRef, collect_refs, resolve_refs
from hrl_tasks.scheduler.worker_side import (
    call_object,
    change_supply,
    create_object,
    destroy_object,
    schedule_unrunnable,
    skip_calls,
)

if TYPE_CHECKING:
    from hrl_tasks.scheduler.engine import Engine

logger = logging.getLogger(__name__)

SNAPSHOT = "get_state"
INTERNAL = ("." + SNAPSHOT, ".__init__")
SWEEP_INTERVAL_S = 1.0


@dataclass(eq=False)
class ObjectRecord:
    """The driver's record of one stateful worker."""

    engine: Engine
    obj_id: str
    name: str
    factory: Any
    args: tuple
    kwargs: dict
    request: dict
    strategy: str
    max_restarts: int
    reissue_calls: bool
    address: str | None = None
    next_seq: int = 0
    restarts: int = 0
    state: Any = None
    has_state: bool = False
    thread_safe: bool = False
    gone: BaseException | None = None
    creation: TaskRef | None = None
    calls: dict = field(default_factory=dict)
    snapshots: dict = field(default_factory=dict)  # seq -> [(ref, future) waiting for it]
    group: list | None = None  # the records of a WorkerGroup this object belongs to
    label: str = ""  # names its calls in statistics and the dashboard: "label.method"
    state_seq: int = -1
    lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self):
        self.placed = threading.Condition(self.lock)
        self.label = self.label or self.name

    # --- placement and creation ------------------------------------------------

    def start(self, exclude=()) -> None:
        address = self._place(exclude)
        with self.lock:
            creation = self._begin_incarnation(address)
            self.placed.notify_all()
        creation._start_attempt(0)

    def _begin_incarnation(self, address: str) -> TaskRef:
        """Point the record at a new home; returns the creation call to launch (lock held)."""
        self.address = address
        base = self._next()
        ref = TaskRef(self.engine, f"{self.label}.__init__", self._launch_creation, [])
        ref.call_info = (self, base)
        self.creation = ref
        self.calls[base] = ref
        return ref

    def _launch_creation(self, attempt: int):
        seq = self.creation.call_info[1]
        args = (self.obj_id, seq, self.factory, self.args, self.kwargs, self.state)
        future = self.engine.run(
            create_object, args, {}, name=f"{self.label}.__init__", attempt=attempt,
            workers=[self.address], internal=True,
        )  # fmt: skip
        return future, {}

    def _place(self, exclude) -> str:
        ledger, changed = self.engine.ledger, self.engine.ledger_changed
        with changed:
            if not set(ledger.capacity) - set(exclude):
                exclude = ()  # the only worker came back: better there than nowhere
            while True:
                ledger.check(self.request)
                address = ledger.choose(self.request, self.strategy, exclude)
                if address is not None:
                    ledger.acquire(self.obj_id, address, self.request)
                    break
                changed.wait(SWEEP_INTERVAL_S)
        if self.request:
            self._change_supply(address, {k: -v for k, v in self.request.items()})
        return address

    def _change_supply(self, address: str, delta: dict) -> None:
        client = self.engine.client
        held = {} if delta and next(iter(delta.values())) > 0 else self.request
        client.set_metadata(["hrl-tasks", "held", address, self.obj_id], held)
        try:
            client.run(change_supply, delta, workers=[address])
            if next(iter(delta.values())) > 0:
                client.run_on_scheduler(schedule_unrunnable, worker=address)
        except (OSError, KeyError, ValueError):
            pass  # the worker is gone; so is what it advertised

    def _release(self, address: str | None) -> None:
        with self.engine.ledger_changed:
            held = self.engine.ledger.release(self.obj_id)
            self.engine.ledger_changed.notify_all()
        if held is not None and self.request and address is not None:
            self._change_supply(address, dict(self.request))

    def _next(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    # --- calls -------------------------------------------------------------

    def call(
        self,
        method: str,
        args: tuple,
        kwargs: dict,
        internal: bool = False,
        speculation=None,
        direct: bool = False,
    ) -> TaskRef:
        if not isinstance(method, str):
            raise TypeError(f"call needs a method name (a str), got {method!r}")
        deps: list[TaskRef] = []
        collect_refs((args, kwargs), deps)
        name = f"{self.label}.{method}"
        if direct and deps:
            raise TypeError(
                f"a direct call ({name}) takes values, not TaskRefs such as {deps[0].name!r}: "
                "pass its .result(), use engine.share(value) for a value many direct calls "
                "need, or make the call without direct=True"
            )
        launcher = self._direct_launcher if direct else self._call_launcher
        with self.lock:
            self._wait_placed()
            seq = self._next()
            ref = TaskRef(self.engine, name, None, deps)
            ref._launch = launcher(ref, method, args, kwargs, internal)
            ref.call_info = (self, seq)
            ref.call_args = (method, args, kwargs)
            ref.speculation = speculation
            ref.direct = direct
            self.calls[seq] = ref
        if not internal:
            self.engine._count("submitted")
        ref._start_attempt(0)
        if speculation is not None:
            self.engine.speculator.track(ref)
        return ref

    def _wait_placed(self) -> None:
        deadline = time.monotonic() + 3 * self.engine.lost_worker_timeout
        while self.address is None and self.gone is None:
            if not self.placed.wait(max(0.0, deadline - time.monotonic())):
                raise WorkerLostError(f"stateful worker {self.name!r} has no worker to run on")
        if self.gone is not None:
            raise self.gone

    def _call_launcher(self, ref: TaskRef, method: str, args: tuple, kwargs: dict, internal: bool):
        def launch(attempt: int):
            real_args, used = resolve_refs(args)
            real_kwargs, used_kw = resolve_refs(kwargs)
            call = (self.obj_id, ref.call_info[1], method, real_args, real_kwargs)
            future = self.engine.run(
                call_object, call, {}, name=ref.name, attempt=attempt,
                workers=[self.address], internal=internal,
            )  # fmt: skip
            return future, {**used, **used_kw}

        return launch

    def _direct_launcher(self, ref: TaskRef, method: str, args: tuple, kwargs: dict, internal):
        """Attempts of a direct call: one message to the object's worker each."""

        def launch(attempt: int):
            address = self.address
            spec = self.engine._spec(ref.name, attempt, None, internal)
            (real_args, real_kwargs), values = direct_arguments((args, kwargs), address)
            call = (self.obj_id, ref.call_info[1], method, real_args, real_kwargs)
            return send_direct(self.engine, address, self.creation, spec, call, values), {}

        return launch

    def call_succeeded(self, ref: TaskRef, future) -> None:
        """A call finished on the worker (runs in Dask's callback thread)."""
        seq = ref.call_info[1]
        with self.lock:
            self.calls.pop(seq, None)
            if ref is self.creation:
                info = future.result()
                self.has_state, self.thread_safe = info["has_state"], info["thread_safe"]
            elif seq in self.snapshots:
                self._store_snapshot(seq, future)
                return
            elif self.has_state:
                self._snapshot_after(ref, future)
                return
        if ref._finish(future) and ref is not self.creation:
            self.engine._count("finished")

    def _snapshot_after(self, ref: TaskRef, future) -> None:
        """Resolve ``ref`` once a snapshot taken after it is stored (lock held)."""
        later = [seq for seq in self.snapshots if seq > ref.call_info[1]]
        if later:
            self.snapshots[min(later)].append((ref, future))
            return
        snap = self.call(SNAPSHOT, (), {}, internal=True, direct=ref.direct)
        self.snapshots[snap.call_info[1]] = [(ref, future)]

    def _store_snapshot(self, seq: int, future) -> None:
        waiting = self.snapshots.pop(seq)
        if seq > self.state_seq:
            self.state, self.state_seq = future.result(), seq
        for ref, result in waiting:
            if ref._finish(result):
                self.engine._count("finished")

    def call_failed(self, ref: TaskRef, error: BaseException) -> None:
        if isinstance(error, (WorkerLostError, KilledWorker)):
            address = getattr(error, "address", None) or self.address  # where the call was
            lost = {"action": "object-lost", "obj_id": self.obj_id, "address": address}
            self.engine._events.put(lost)
            return
        with self.lock:
            self.calls.pop(ref.call_info[1], None)
            for waiter, result in self.snapshots.pop(ref.call_info[1], []):
                waiter._finish(result)  # the call succeeded; only its snapshot did not
        if ref._fail(error):
            self.engine._count("failed")

    def skip(self, seq: int) -> None:
        """Tell the worker that call ``seq`` will never run, so later calls go on."""
        with self.lock:
            self.calls.pop(seq, None)
            address = self.address
        if address is not None and address in self.engine.ledger.capacity:
            skip = (self.obj_id, [seq])
            skipping = self.engine.run(
                skip_calls, skip, {}, name="skip", workers=[address], internal=True
            )
            fire_and_forget(skipping)

    # --- recovery and end ------------------------------------------------------

    def recover(self, dead_address: str | None) -> None:
        """Re-create the object elsewhere after its worker died (keeper thread).

        Of the calls in flight, those queued behind another call never started
        and are re-issued on the new object. The call that may have been
        running, and calls that ran but whose results died with the worker,
        are re-issued with ``reissue_calls=True`` and fail otherwise.
        """
        with self.lock:
            if self.gone is not None or (dead_address and self.address != dead_address):
                return
            dead_address = self.address
            self.address = None
            pending = [ref for _, ref in sorted(self.calls.items())]
            ran = [waiter for waiting in self.snapshots.values() for waiter, _ in waiting]
            self.snapshots.clear()
            self.calls.clear()
        self._release(None)
        user_calls = [r for r in pending if not r.name.endswith(INTERNAL)]
        maybe_started = user_calls if self.thread_safe else user_calls[:1]
        if pending and pending[0] not in user_calls:
            maybe_started = []  # a snapshot or the creation was the one running
        if self.restarts >= self.max_restarts:
            reason = WorkerLostError(
                f"stateful worker {self.name!r} lost its worker {dead_address} and has "
                f"been re-created {self.restarts} times already (max_restarts)"
            )
            self._end(reason, pending + ran)
            return
        self.restarts += 1
        try:
            address = self._place(exclude={dead_address})
        except Exception as exc:  # no room anywhere, ever: say so
            self._end(ObjectStartError(f"cannot re-create {self.name!r}: {exc}"), pending + ran)
            return
        restored = "from its last snapshot" if self.has_state else "afresh from its factory"
        lost = WorkerLostError(
            f"a call to {self.name!r} was running or had run when its worker {dead_address} "
            f"died; the object was re-created on {address} {restored}. "
            "Create it with reissue_calls=True to re-issue such calls."
        )
        with self.lock:
            launches = [self._begin_incarnation(address)]
            for ref in sorted(ran, key=lambda r: r.call_info[1]) + user_calls:
                if ref.done():
                    continue
                if (ref in ran or ref in maybe_started) and not self.reissue_calls:
                    if ref._fail(lost):
                        self.engine._count("failed")
                    continue
                seq = self._next()
                ref.call_info = (self, seq)
                self.calls[seq] = ref
                launches.append(ref)
            self.placed.notify_all()
        launches[0]._start_attempt(0)
        for ref in launches[1:]:
            ref._restart()

    def _end(self, reason: BaseException, refs) -> None:
        with self.lock:
            self.gone = reason
            self.placed.notify_all()
        for ref in refs:
            if ref._fail(reason):
                self.engine._count("failed")

    def kill(self, timeout: float | None) -> None:
        with self.lock:
            if self.gone is not None:
                return
            self._wait_placed()
            seq = self._next()
            address = self.address
            self.gone = ObjectStartError(f"stateful worker {self.name!r} was killed")
            self.placed.notify_all()
        future = self.engine.run(
            destroy_object, (self.obj_id, seq), {}, name=f"{self.label}.__del__",
            workers=[address], internal=True,
        )  # fmt: skip
        try:
            future.result(timeout=timeout)
        except Exception as exc:  # gone anyway: never let a stuck object stop a shutdown
            logger.warning("stateful worker %r did not end cleanly: %r", self.name, exc)
        finally:
            self._release(address)
            self.engine.objects.pop(self.obj_id, None)


class WorkerHandle:
    """A stateful worker: ``handle.call("method", *args)`` returns a TaskRef.

    Example::

        counter = engine.create_worker(Counter, start=10)
        refs = [counter.call("add", 1) for _ in range(5)]
        engine.gather(refs)          # [11, 12, 13, 14, 15]: calls run in order
        counter.kill()
    """

    def __init__(self, record: ObjectRecord):
        self._record = record

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def address(self) -> str | None:
        """The worker the object lives on now (changes after a recovery)."""
        return self._record.address

    @property
    def restarts(self) -> int:
        """How often the object was re-created after its worker died."""
        return self._record.restarts

    def call(self, method: str, *args, speculative=False, direct=False, **kwargs) -> TaskRef:
        """Call ``obj.method(*args, **kwargs)`` on the worker; returns a TaskRef.

        Args:
            speculative: for a member of a :class:`WorkerGroup`: if the call
                straggles, the same call goes to an idle peer and the first
                result wins. The peers must be equivalent (e.g. rollout
                workers holding the same weights): the result is an
                equivalent one, not an identical one.
            direct: send the call straight to the worker instead of through
                the scheduler (about 2 ms instead of 7-9 ms here; see
                :mod:`~hrl_tasks.scheduler.direct`). The result then lives in
                the driver, and the arguments must be values, not TaskRefs
                (``engine.share(value)`` for a value that many calls need).

        The names ``speculative`` and ``direct`` are reserved: methods cannot
        take arguments called so.

        Raises:
            TypeError: for a direct call with a TaskRef as an argument.
        """
        policy = SpeculationPolicy.coerce(speculative)
        if policy is not None and self._record.group is None:
            raise ValueError(
                f"{self.name!r} belongs to no group, so it has no peer to send a backup "
                "to: create it with engine.create_group(...)"
            )
        return self._record.call(method, args, kwargs, speculation=policy, direct=bool(direct))

    def ready(self, timeout: float | None = None) -> WorkerHandle:
        """Wait until the object is built; raises what its factory raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            creation = self._record.creation
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                creation.result(left)
                return self
            except WorkerLostError:
                if self._record.creation is creation:
                    raise
            except TimeoutError:
                raise
            except Exception as exc:
                raise ObjectStartError(
                    f"stateful worker {self.name!r} failed to start: {exc}"
                ) from exc

    def kill(self, timeout: float | None = 30.0) -> None:
        """End the object after the calls made before; frees what it holds."""
        self._record.kill(timeout)

    def __repr__(self) -> str:
        return f"<WorkerHandle {self.name} on {self.address}>"

    def __reduce__(self):
        raise TypeError(
            "a WorkerHandle cannot be pickled: call it from the program that created it"
        )


class WorkerGroup:
    """Equivalent stateful workers, e.g. rollout workers holding the same weights.

    Calls made with ``speculative=True`` on a member may be backed up on an
    idle peer. Example::

        workers = engine.create_group(RolloutWorker, 4, env_id="CartPole-v1")
        batches = [w.call("sample", 512, speculative=True) for w in workers]
    """

    def __init__(self, handles: list[WorkerHandle]):
        self.handles = handles
        records = [h._record for h in handles]
        for record in records:
            record.group = records

    def __len__(self) -> int:
        return len(self.handles)

    def __getitem__(self, index: int) -> WorkerHandle:
        return self.handles[index]

    def __iter__(self):
        return iter(self.handles)

    def call_all(self, method: str, *args, **kwargs) -> list[TaskRef]:
        """The same call on every member; one TaskRef each."""
        return [h.call(method, *args, **kwargs) for h in self.handles]

    def kill(self, timeout: float | None = 30.0) -> None:
        for handle in self.handles:
            handle.kill(timeout)


def object_keeper(engine: Engine) -> None:
    """Background thread: follows worker joins and deaths, and recovers objects."""
    while True:
        try:
            msg = engine._events.get(timeout=SWEEP_INTERVAL_S)
        except queue.Empty:
            msg = {"action": "sweep"}
        if msg is None or engine.closed:
            return
        try:
            handle_cluster_event(engine, msg)
        except Exception:  # keep watching; the next sweep tries again
            if engine.closed:
                return


def handle_cluster_event(engine: Engine, msg: dict) -> None:
    action = msg.get("action")
    if action == "object-lost":
        record = engine.objects.get(msg["obj_id"])
        if record is not None:
            start_recovery(record, msg.get("address"))
        return
    if action == "sweep" and not any(r.gone is None for r in engine.objects.values()):
        return
    if action == "remove-worker" and not msg.get("expected"):
        engine._count("workers_lost")
    engine._refresh_ledger()
    alive = set(engine.ledger.capacity)
    for record in list(engine.objects.values()):
        if record.gone is None and record.address is not None and record.address not in alive:
            start_recovery(record, record.address)


def start_recovery(record: ObjectRecord, address: str | None) -> None:
    threading.Thread(
        target=record.recover, args=(address,), name=f"recover-{record.obj_id}", daemon=True
    ).start()
