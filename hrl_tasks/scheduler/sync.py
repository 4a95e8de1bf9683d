"""A synchronous, in-process engine with the same API, for debugging and fast tests.

``SyncEngine`` drives the same state machine as the Dask engine; its backend
carries out each instruction at once in the calling thread: a launched
attempt runs before ``submit`` returns, stateful workers are plain objects in
this process. Breakpoints and stack traces work as in ordinary Python.

Example::

    with SyncEngine() as engine:
        assert engine.submit(pow, 2, 10).result() == 1024
"""

from __future__ import annotations

import contextlib
import threading
import time

from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.context import TaskContext, enter_task, leave_task
from hrl_tasks.scheduler.engine import Engine
from hrl_tasks.scheduler.errors import ObjectStartError
from hrl_tasks.scheduler.handles import WorkerHandle
from hrl_tasks.scheduler.records import BackendRecords
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.settings import validating
from hrl_tasks.scheduler.shared import Shared, rebuilt
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.taskref import Local, TaskRef

WORKER = "inprocess"


class InProcessBackend(BackendRecords):
    """Carries out instructions at once, in the calling thread."""

    def __init__(self, state: EngineState, resources: dict):
        super().__init__()
        self.state = state
        self.resources = resources
        self.lock = threading.RLock()
        self.live: dict = {}  # obj id -> the object
        self.closed = False

    def push(self, *events) -> None:
        events = self.with_released(events, ev.Released)
        with self.lock:
            instructions = self.state.handle(*events, now=time.monotonic())
        for ins in instructions:
            self.carry_out(ins)

    feed = push

    @staticmethod
    def holding():
        """Nothing is held in-process: each event is handled as it is pushed."""
        return contextlib.nullcontext()

    def hand_over_held(self) -> None:
        """Nothing is held in-process."""

    def raise_if_invalid(self) -> None:
        """Nothing to raise: an invalid state raises in :meth:`push` itself."""

    push_and_wait = push

    def read_workers(self) -> dict:
        return {WORKER: (1, dict(self.resources))}

    def see_workers(self) -> ev.WorkersSeen:
        return ev.WorkersSeen(self.read_workers())

    def carry_out(self, ins) -> None:
        if isinstance(ins, ev.Launch):
            self.run(ins)
        elif isinstance(ins, ev.Resolve):
            self.settle(ins.task_id, value=self.result_of(ins.key) or Local(None))
        elif isinstance(ins, ev.Fail):
            self.settle(ins.task_id, error=ins.error)
        elif isinstance(ins, (ev.Forget, ev.Cancel)):
            for key in ins.keys:
                self.forget(key)
        elif isinstance(ins, ev.Refresh):
            self.push(self.see_workers())
        elif isinstance(ins, ev.Later) and isinstance(ins.event, ev.RetryDue):
            time.sleep(ins.delay)  # nothing else runs meanwhile in this engine
            self.push(ins.event)
        # Ticks, skips and supply changes mean nothing in one process.

    def run(self, launch: ev.Launch) -> None:
        """Run one attempt now and report how it ended."""
        fn, args, kwargs, topic = self._call_of(launch)
        ctx = TaskContext(launch.key, launch.name, launch.attempt, launch.request, topic)
        token = enter_task(ctx)
        start = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            done = ev.AttemptDone(launch.key, "error", exc)
        else:
            self.track(launch.key, "local", value=Local(value))
            done = ev.AttemptDone(launch.key, "finished", value=value if launch.fetch else None)
        finally:
            leave_task(token)
        elapsed = time.perf_counter() - start
        self.push(ev.Ended(launch.key, launch.name, WORKER, elapsed), done)

    def _call_of(self, launch: ev.Launch) -> tuple:
        if launch.kind == "task":
            fn, args, kwargs, topic = self.tasks[launch.task_id].payload
            return fn, *resolve_local((args, kwargs)), topic
        factory, fargs, fkwargs, topic = self.recipe_of(launch.obj_id)
        if launch.kind == "create":
            self.creating(launch.obj_id, launch.task_id)
            return self._create, (launch.obj_id, factory, fargs, fkwargs), {}, topic
        if launch.kind == "destroy":
            return self._destroy, (launch.obj_id,), {}, topic
        if launch.kind == "snapshot":
            return self._method(launch.obj_id, "get_state"), (), {}, topic
        method, args, kwargs, _ = self.tasks[launch.args_of or launch.task_id].payload
        return self._method(launch.obj_id, method), *resolve_local((args, kwargs)), topic

    def _create(self, obj_id: str, factory, args, kwargs) -> dict:
        obj = self.live[obj_id] = factory(*args, **kwargs)
        has_state = callable(getattr(obj, "get_state", None)) and callable(
            getattr(obj, "restore_state", None)
        )
        return {"has_state": has_state, "thread_safe": True}

    def _method(self, obj_id: str, method: str):
        def call(*args, **kwargs):
            return getattr(self.live[obj_id], method)(*args, **kwargs)

        return call

    def _destroy(self, obj_id: str) -> bool:
        obj = self.live.pop(obj_id, None)
        close = getattr(obj, "close", None)
        if callable(close):
            close()
        return obj is not None

    def gather(self, refs: list, timeout: float | None) -> list:
        return [ref.outcome.result(timeout).value for ref in refs]

    @staticmethod
    def place(value, task_id: str, broadcast: bool = False) -> Local:
        return Local(value)

    def close(self) -> None:
        self.closed = True


def resolve_local(obj):
    """``obj`` with each TaskRef replaced by its value (everything is finished here)."""
    if isinstance(obj, TaskRef):
        return obj.outcome.result().value
    if isinstance(obj, Shared):
        return obj.value
    if isinstance(obj, (list, tuple, set, frozenset)):
        return rebuilt(obj, [resolve_local(x) for x in obj])
    if isinstance(obj, dict):
        return {k: resolve_local(v) for k, v in obj.items()}
    return obj


class SyncEngine(Engine):
    """Everything in-process: ``submit`` runs the function before it returns.

    Args:
        resources: what the single in-process "worker" declares, for the same
            :class:`ResourceError` checks as a cluster (default ``{"CPU": 1}``).
        retries: the default retry policy.
        validate: as for :class:`~hrl_tasks.scheduler.engine.Engine`.
    """

    def __init__(
        self,
        resources: dict | None = None,
        retries: RetryPolicy | int | None = None,
        validate: bool | None = None,
    ):
        self.client = None
        self.cluster, self.close_cluster = None, None
        self.owns_client = False
        self.topic = WORKER
        state = EngineState("sync", validate=validating(validate))
        backend = InProcessBackend(state, resources or {"CPU": 1})
        self._start(state, backend, retries, lost_worker_timeout=10.0, activate=True)
        backend.push(backend.see_workers())

    @property
    def dashboard_link(self) -> None:
        return None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.close()
            self._deactivate()
            if self._page is not None:
                self._page.close()

    def create_worker(self, cls_or_factory, *args, **kwargs) -> WorkerHandle:
        """As :meth:`Engine.create_worker`; a factory that raises raises here."""
        handle = super().create_worker(cls_or_factory, *args, **kwargs)
        creation = self.backend.creation_of(handle.obj_id)
        if creation.exception() is not None:
            error = creation.exception()
            raise ObjectStartError(f"stateful worker {handle.name!r} failed to start: {error}")
        return handle

    def resources(self) -> dict:
        free = dict(self.backend.resources)
        return {WORKER: {"declared": free, "held_by_objects": {}, "available": free}}

    def reaches_workers(self, timeout: float = 5.0) -> bool:
        """Always: the one "worker" is this process."""
        return True
