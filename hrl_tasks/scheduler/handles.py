"""Handles on stateful workers: objects living in a worker process.

Unlike Dask actors, each call is an ordinary task (or a direct call): a real
future that can be waited on with other TaskRefs and, for calls through the
scheduler, passed to other tasks as a dependency and seen in the dashboard.

Recovery: when the object's worker dies, the object is built again on
another worker from its factory and, if it has ``get_state()`` /
``restore_state(state)``, restored from its last snapshot. Snapshots are taken
after calls, as the next call in the object's order, and a call's TaskRef
resolves only once a snapshot taken after it is stored on the driver: a
result you hold is never lost. Calls in flight at the death are re-issued if
the handle was created with ``reissue_calls=True``, and fail with
:class:`~hrl_tasks.scheduler.errors.WorkerLostError` otherwise. The decisions
are the state machine's (:mod:`~hrl_tasks.scheduler.state`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from hrl_tasks.scheduler.context import task_wait
from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.speculation import SpeculationPolicy

if TYPE_CHECKING:
    from hrl_tasks.scheduler.taskref import TaskRef


class ObjectOwner(Protocol):
    """What a handle asks of the engine that made its object (the engine is one; this
    module imports none, so that the engine may import it)."""

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
    ) -> TaskRef: ...

    def kill(self, handle: WorkerHandle, timeout: float | None) -> None: ...

    def object_info(self, obj_id: str, field: str) -> Any: ...

    def object_alive(self, obj_id: str) -> bool: ...

    def object_creation(self, obj_id: str) -> Any: ...

    def rebuild_with(self, obj_id: str, kwargs: dict) -> None: ...

    def form_group(self, obj_ids: list[str]) -> None: ...


class WorkerHandle:
    """A stateful worker: ``handle.call("method", *args)`` returns a TaskRef.

    Example::

        counter = engine.create_worker(Counter, start=10)
        refs = [counter.call("add", 1) for _ in range(5)]
        engine.gather(refs)          # [11, 12, 13, 14, 15]: calls run in order
        counter.kill()
    """

    def __init__(self, engine: ObjectOwner, obj_id: str, name: str, label: str):
        self.engine = engine
        self.obj_id = obj_id
        self.name = name
        self.label = label
        self.group: list[WorkerHandle] | None = None

    @property
    def address(self) -> str | None:
        """The worker the object lives on now (changes after a recovery)."""
        return self.engine.object_info(self.obj_id, "address")

    @property
    def alive(self) -> bool:
        """Whether the object still takes calls (not killed, not out of restarts)."""
        return self.engine.object_alive(self.obj_id)

    @property
    def restarts(self) -> int:
        """How often the object was re-created after its worker died."""
        return self.engine.object_info(self.obj_id, "restarts") or 0

    def call(
        self,
        method: str,
        *args,
        speculative=False,
        direct=False,
        keep=False,
        relay=False,
        **kwargs,
    ) -> TaskRef:
        """Call ``obj.method(*args, **kwargs)`` on the worker; returns a TaskRef.

        Args:
            speculative: for a member of a :class:`WorkerGroup`: if the call
                straggles, the same call goes to an idle peer and the first
                result wins. The peers must be equivalent (e.g. rollout
                workers holding the same weights): the result is an
                equivalent one, not an identical one.
            direct: send the call straight to the worker instead of through
                the scheduler (about 2 ms instead of 7-9 ms here). The result
                then comes to the driver, and the arguments are values
                (``engine.share(value)`` for a value that many calls need) or
                TaskRefs of direct calls: the call goes once those have finished
                (if one failed, it fails with `InputFailedError`, or
                `WorkerLostError`, without running).
            keep: with ``direct``: the result stays on the object's worker
                (the driver gets a TaskRef only, and ``.result()`` fetches it);
                a direct call given that TaskRef as an argument gets the value
                from that worker, not through the driver. The worker lets the
                result go when the last TaskRef to it is dropped. A call whose
                kept input was lost with its worker does not run and fails with
                ``WorkerLostError``.
            relay: with ``direct``, in a round made inside ``engine.together()``:
                the call may go with the round's other calls to workers on the
                same host as one message, through one of them, and come back
                with theirs (`hrl_tasks.scheduler.relay`). Should that worker die,
                the call fails with ``WorkerLostError`` although its own worker
                lives (it may have run): for calls that may be made again, such
                as a sample. Ignored without ``direct`` or with ``keep``.

        The names ``speculative``, ``direct``, ``keep`` and ``relay`` are reserved:
        methods cannot take arguments called so.

        Raises:
            TypeError: for a direct call with a TaskRef that is not a direct call's
                as an argument; for ``keep`` without ``direct``.
        """
        policy = SpeculationPolicy.coerce(speculative)
        if policy is not None and self.group is None:
            raise ValueError(
                f"{self.name!r} belongs to no group, so it has no peer to send a backup "
                "to: create it with engine.create_group(...)"
            )
        return self.engine.call(
            self, method, args, kwargs, policy, bool(direct), bool(keep), bool(relay)
        )

    def rebuild_with(self, **kwargs) -> None:
        """Keyword arguments for the factory when the object is next re-created after
        its worker died, merged over those it was created with.

        For state the driver keeps anyway, such as the latest weights of a rollout
        worker: kept here it costs nothing per call, where ``get_state`` would be
        snapshotted after every call. The new object then has it before any call
        (calls re-issued on it included)."""
        self.engine.rebuild_with(self.obj_id, kwargs)

    def ready(self, timeout: float | None = None) -> WorkerHandle:
        """Wait until the object is built; raises what its factory raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            creation = self.engine.object_creation(self.obj_id)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                with task_wait():  # in a task: the object may need this worker's thread
                    creation.result(left)
                return self
            except WorkerLostError:
                gone = self.engine.object_info(self.obj_id, "gone")
                if gone is not None or (deadline is not None and time.monotonic() > deadline):
                    raise
                time.sleep(0.01)  # the object moves: its next creation is on its way
            except TimeoutError:
                raise
            except Exception as exc:
                raise ObjectStartError(
                    f"stateful worker {self.name!r} failed to start: {exc}"
                ) from exc

    def kill(self, timeout: float | None = 30.0) -> None:
        """End the object after the calls made before; frees what it holds."""
        self.engine.kill(self, timeout)

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
        for handle in handles:
            handle.group = handles
        if handles:
            handles[0].engine.form_group([h.obj_id for h in handles])

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
