"""The engine's stateful workers: objects that live in one worker process and
take calls in order (:class:`~hrl_tasks.scheduler.handles.WorkerHandle`). A part of
:class:`~hrl_tasks.scheduler.engine.Engine` (its base class): user calls become the
state machine's events (``CreateObject``, ``CallObject``, ``KillObject``), and what a
handle asks is read from the state.
"""

from __future__ import annotations

import logging
import uuid

from distributed import get_worker

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.context import current_task
from hrl_tasks.scheduler.handles import WorkerGroup, WorkerHandle
from hrl_tasks.scheduler.resources import normalize_request
from hrl_tasks.scheduler.taskref import TaskRef, collect_refs

logger = logging.getLogger(__name__)


def _own_worker() -> frozenset:
    """The address of the worker process this code runs in, if it runs in one."""
    try:
        return frozenset({get_worker().address})
    except ValueError:
        return frozenset()


class StatefulWorkers:
    """The engine's stateful-worker API (see the module). Needs the engine's
    ``backend``, ``state``, ``topic``, ``_new_ref``, ``_inputs``, ``wait`` and
    ``check_resources``."""

    def create_worker(
        self,
        cls_or_factory,
        *args,
        resources: dict | None = None,
        strategy: str = "spread",
        name: str | None = None,
        max_restarts: int = 3,
        reissue_calls: bool = False,
        label: str | None = None,
        **kwargs,
    ) -> WorkerHandle:
        """Create a stateful worker: an object living in one worker process.

        ``handle.call("method", *args)`` returns a TaskRef. Calls run in the
        order they were made, one at a time unless the class sets
        ``thread_safe = True``. If the worker process dies the object is built
        again elsewhere from ``cls_or_factory(*args, **kwargs)``; if it has
        ``get_state()``/``restore_state(state)``, the state is snapshotted
        after each call and restored (a call whose result you hold is never
        lost).

        Args:
            cls_or_factory: a class or a function returning the object.
            resources: held for the object's whole life (placement and ledger).
            strategy: ``"spread"`` over workers or ``"pack"`` onto few.
            name: for errors and the dashboard; default the class name.
            max_restarts: re-creations after worker deaths before giving up.
            reissue_calls: re-issue calls that were in flight when the worker
                died (safe for idempotent methods); otherwise they fail with
                :class:`WorkerLostError`.
            label: names its calls in statistics and the dashboard
                (``label.method``); equivalent workers share one, so their
                durations are pooled. Default ``name``.

        Raises:
            ResourceError: if no worker could ever meet ``resources``.
        """
        if strategy not in ("spread", "pack"):
            raise ValueError(f"strategy must be 'spread' or 'pack', got {strategy!r}")
        request = normalize_request(resources)
        self.check_resources(request)
        name = name or getattr(cls_or_factory, "__name__", "object")
        label = label or name
        obj_id = f"{name}-{uuid.uuid4().hex[:8]}"
        parent = current_task()
        topic = self.topic if parent is None else parent.topic
        creation = self._new_ref(f"{label}.__init__", None, pinned=True)
        creation.forgotten_at_end = True
        self.backend.add_object(obj_id, (cls_or_factory, args, kwargs, topic), creation.outcome)
        # Made inside a task: elsewhere than the task's own process when there is room,
        # so that a nested algorithm's rollout workers do not share its learner's process.
        avoid = _own_worker() if parent is not None else frozenset()
        create = ev.CreateObject(
            obj_id,
            creation.task_id,
            name,
            label,
            request,
            strategy,
            max_restarts,
            reissue_calls,
            avoid,
        )
        try:  # what other engines hold now, so that it is placed where there is room
            seen = [self.backend.see_workers()]
        except Exception:  # the scheduler is busy or going away: the last look serves
            seen = []
        self.backend.push_and_wait(*seen, create)  # placed on return if there is room now
        return WorkerHandle(self, obj_id, name, label)

    def create_group(self, cls_or_factory, n: int, *args, **kwargs) -> WorkerGroup:
        """``n`` equivalent stateful workers (spread by default) as a :class:`WorkerGroup`.

        Takes the arguments of :meth:`create_worker`; members are named ``name-i``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"a group needs n >= 1 members, got {n!r}")
        base = kwargs.pop("name", None) or getattr(cls_or_factory, "__name__", "object")
        handles = [
            self.create_worker(cls_or_factory, *args, name=f"{base}-{i}", label=base, **kwargs)
            for i in range(n)
        ]
        return WorkerGroup(handles)

    def form_group(self, obj_ids: list[str]) -> None:
        """Make these stateful workers peers: a speculative call may be backed up on one."""
        self.backend.push(ev.FormGroup(tuple(obj_ids)))

    def call(
        self,
        handle: WorkerHandle,
        method: str,
        args,
        kwargs,
        speculation,
        direct,
        keep=False,
        relay=False,
    ) -> TaskRef:
        """``handle.call(...)``: a call of a stateful worker's method."""
        if not isinstance(method, str):
            raise TypeError(f"call needs a method name (a str), got {method!r}")
        name = f"{handle.label}.{method}"
        if direct and not dask_compat.engine_threads_know_their_worker():
            direct, keep = False, False  # what runs in the engine's threads needs it
        if keep and not direct:
            raise TypeError(f"keep=True is for direct calls ({name}): add direct=True")
        if direct:
            found: list[TaskRef] = []
            collect_refs((args, kwargs), found)
            for ref in found:
                if not ref.direct_call:
                    raise TypeError(
                        f"a direct call ({name}) takes values and the TaskRefs of direct "
                        f"calls, not {ref.name!r}: pass its .result(), use "
                        "engine.share(value) for a value many direct calls need, or make "
                        "the call without direct=True"
                    )
            deps: list[TaskRef] = []
        else:
            found, deps = [], self._inputs(args, kwargs)
        ref = self._new_ref(
            name,
            (method, args, kwargs),
            direct,
            pinned=True,
            keep=keep,
            relay=relay and not keep,
            inputs=tuple(found),
        )
        ref.deps = tuple(d.task_id for d in deps)
        call = ev.CallObject(
            ref.task_id,
            handle.obj_id,
            method,
            ref.deps,
            direct_call=direct,
            speculation=speculation,
        )
        self.backend.push(call)
        return ref

    def kill(self, handle: WorkerHandle, timeout: float | None) -> None:
        """``handle.kill()``: end the object after the calls made before; frees what it holds."""
        ref = self._new_ref(f"{handle.label}.__del__", None, pinned=True)
        ref.forgotten_at_end = True
        self.backend.push(ev.KillObject(handle.obj_id, ref.task_id))
        done, _ = self.wait([ref], timeout=timeout)
        if not done:  # gone anyway: never let a stuck object stop a shutdown
            logger.warning("stateful worker %r did not end within %s s", handle.name, timeout)
            self.backend.push(ev.AbandonObject(handle.obj_id))

    def object_info(self, obj_id: str, field: str):
        """One field of a stateful object's state (``address``, ``restarts``, ``gone``),
        or None for an object the engine does not know (any more)."""
        with self.backend.lock:
            obj = self.state.objects.get(obj_id)
            return None if obj is None else getattr(obj, field)

    def rebuild_with(self, obj_id: str, kwargs: dict) -> None:
        """Merge ``kwargs`` into the factory arguments a stateful object is re-created
        with (see :meth:`WorkerHandle.rebuild_with`)."""
        with self.backend.lock:
            self.backend.rebuild_with(obj_id, kwargs)

    def object_alive(self, obj_id: str) -> bool:
        """Whether a stateful object still takes calls (known, not killed, not out of restarts)."""
        with self.backend.lock:
            obj = self.state.objects.get(obj_id)
            return obj is not None and obj.gone is None

    def object_creation(self, obj_id: str):
        """The future of a stateful object's latest creation (it changes when the object
        moves after its worker died), or None before the first."""
        return self.backend.creation_of(obj_id)
