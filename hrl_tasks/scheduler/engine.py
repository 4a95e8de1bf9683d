"""The engine's public API: :class:`Engine` on a Dask cluster, and ``current_engine()``.

An engine is a state machine (:mod:`~hrl_tasks.scheduler.state`, every
decision) and a backend that carries out its instructions
(:mod:`~hrl_tasks.scheduler.backend` on Dask, the in-process one of
:mod:`~hrl_tasks.scheduler.sync`). This module turns user calls into the state
machine's events and hands out :class:`TaskRef` and :class:`WorkerHandle`.

Resources:
    Each worker declares resources (``CPU``, ``GPU``, ``memory``, any custom
    name). A task's request is enforced by Dask on the worker it runs on. A
    stateful worker holds its request for its whole life: the engine's ledger
    records it and lowers what the worker advertises to the scheduler, so
    tasks that would need those resources go elsewhere or wait. A request no
    worker could ever meet raises :class:`ResourceError` at submit.

Nesting:
    Inside a task, ``current_engine()`` returns an engine on the worker's own
    client. Blocking waits inside a task leave the worker's thread pool while
    they wait, and a waiting task lends its resources to its worker until it
    ends: a parent never starves its own children (Dask keeps a seceded task's
    resources, distributed issue 6565), and a tree deeper than the number of
    threads finishes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextvars
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator

import dask
from distributed import Client, get_client, get_worker

from hrl_tasks.scheduler import dask_compat, deployments, worker_events
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.backend import DaskBackend
from hrl_tasks.scheduler.clusters import (
    HeldSettings,
)
from hrl_tasks.scheduler.context import current_task, in_worker_task, task_wait
from hrl_tasks.scheduler.errors import EngineError, ResultsLost
from hrl_tasks.scheduler.handles import WorkerGroup, WorkerHandle
from hrl_tasks.scheduler.page import EnginePage
from hrl_tasks.scheduler.resources import check_satisfiable, normalize_request
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.runtime import WorkerRuntime, local_resources
from hrl_tasks.scheduler.shared import Shared
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.task_service import TaskRoute
from hrl_tasks.scheduler.taskref import TaskRef, collect_refs
from hrl_tasks.scheduler.validate import validating
from hrl_tasks.scheduler.watch import WaitWatch

logger = logging.getLogger(__name__)
RETURN_WHEN = {"ALL_COMPLETED": cf.ALL_COMPLETED, "FIRST_COMPLETED": cf.FIRST_COMPLETED}
ROUTES = ("dask", "direct")  # how plain tasks reach the workers (Engine(route=...))
ROUTE_VARIABLE = "HRL_TASKS_ROUTE"
EVENTS_BACKSTOP_SWEEP_S = 5.0  # seconds between looks at the workers beside the events


def requires_encryption(client_requires: bool, configured: bool, scheduler_address: str) -> bool:
    """Whether a cluster's connections are encrypted: its client requires encryption
    (its ``Security``), or Dask's configuration does (``distributed.comm.require-encryption``),
    or its scheduler speaks ``tls://``. Pure."""
    return bool(client_requires or configured) or scheduler_address.startswith("tls://")


def default_route(route: str | None) -> str:
    """How plain tasks reach the workers: ``route``, or if None the environment's
    ``HRL_TASKS_ROUTE``, else ``"direct"``; a clear error for anything else."""
    route = os.environ.get(ROUTE_VARIABLE) or "direct" if route is None else route
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    return route


def _own_worker() -> frozenset:
    """The address of the worker process this code runs in, if it runs in one."""
    try:
        return frozenset({get_worker().address})
    except ValueError:
        return frozenset()


class _Active:
    """The engine most recently opened in this context (the driver's ``current_engine()``)."""

    engine: contextvars.ContextVar = contextvars.ContextVar("hrl_tasks_engine", default=None)


def current_engine() -> Engine:
    """The engine to submit to from here.

    Inside a task, an engine on the worker's own client (nested tasks); in the
    driver, the engine most recently opened in this context.

    Raises:
        EngineError: if there is none.
    """
    if in_worker_task():
        runtime = WorkerRuntime.of()
        with runtime.cache_lock:  # one engine per worker process, whichever task asks first
            if runtime.engine is None:
                runtime.engine = Engine(get_client(), owns_client=False)
        return runtime.engine
    engine = _Active.engine.get()
    if engine is None or engine.closed:
        raise EngineError(
            "no engine is open here: create one with hrl_tasks.Engine.local() "
            "(or Engine.connect(address)) before calling current_engine()"
        )
    return engine


def worker_local(key: str, factory):
    """An object built once per worker process and shared by the tasks run there.

    For large read-only things every task needs, such as ES's noise table:
    ``table = worker_local("noise", lambda: make_table(seed))``. Outside a worker
    (the driver, or the in-process SyncEngine) the object is kept by the current
    engine instead.
    """
    if in_worker_task():
        runtime = WorkerRuntime.of()
        store, lock = runtime.cache, runtime.cache_lock
    else:
        engine = current_engine()
        store, lock = engine.local_cache, engine.local_cache_lock
    with lock:
        if key not in store:
            store[key] = factory()
        return store[key]


class Engine:
    """Resource-aware tasks, nested tasks and stateful workers on a Dask cluster.

    Example::

        with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
            refs = engine.map(simulate, range(8), retries=2)
            print(engine.gather(refs), engine.stats())

    Args:
        client: the ``distributed.Client`` to run on.
        cluster: a cluster object to close with the engine (``Engine.local``).
        owns_client: whether :meth:`close` closes the client.
        retries: the default retry policy (an int or a :class:`RetryPolicy`).
        lost_worker_timeout: a stateful worker whose worker died waits up to
            three times this for a new home before its calls fail.
        send_interval_s: how long the client may hold messages to the
            scheduler to batch them. Dask's client waits up to 10 ms; RL loops
            make one short round trip after another, and 1 ms took the
            round-trip latency here from 10.6 ms to 6.0 ms.
        validate: check the state machine's invariants after every event (slow;
            for tests). Default: on when the environment sets ``HRL_TASKS_VALIDATE=1``.
            A broken invariant is raised by the next wait.
        stall_warning_s: a wait that sees no progress in the engine (no attempt
            started or ended, no worker came or went) for this long logs the
            story of what it waits for (:meth:`story`); None: never.
        route: how plain tasks reach the workers by default (``submit(route=...)``):
            ``"direct"`` (the default; ``HRL_TASKS_ROUTE`` in the environment sets
            another) placed by the engine and sent on a stream of its own to each
            worker, or ``"dask"`` through Dask's scheduler.
    """

    def __init__(
        self,
        client: Client,
        *,
        cluster=None,
        owns_client: bool = True,
        retries: RetryPolicy | int | None = None,
        lost_worker_timeout: float = 10.0,
        send_interval_s: float | None = 0.001,
        validate: bool | None = None,
        stall_warning_s: float | None = 60.0,
        route: str | None = None,
    ):
        route = default_route(route)
        if send_interval_s is not None:
            dask_compat.set_send_interval(client, send_interval_s)
        self.client = client
        self.cluster, self.close_cluster = None, None
        if cluster is not None:
            self.own_cluster(cluster)
        self.held_settings: HeldSettings | None = None  # the embedded cluster's, while it lives
        self.owns_client = owns_client
        self.topic = f"hrl-tasks-{uuid.uuid4().hex[:12]}"
        nested = in_worker_task()
        # Lost workers come as the scheduler's remove-worker events; a sweep now and
        # then is the backstop (events sent while the client reconnected are not replayed).
        state = EngineState(
            uuid.uuid4().hex[:16],
            placement_timeout=3 * lost_worker_timeout,
            sweep_s=EVENTS_BACKSTOP_SWEEP_S,
            validate=validating(validate),
        )
        backend = DaskBackend(client, state, self.topic)
        self._start(
            state,
            backend,
            retries,
            lost_worker_timeout,
            activate=not nested,
            stall_warning_s=stall_warning_s,
        )
        self.route, self.nested, self.has_workers = route, nested, True
        self._reaches_workers: bool | None = None  # see reaches_workers(); None: not asked
        client.subscribe_topic(self.topic, backend.on_reports)
        if not nested:  # a nested engine's scheduler has it: the root engine put it there
            worker_events.register(client)
        client.subscribe_topic(worker_events.TOPIC, backend.on_cluster_event)  # nested too
        if route == "direct":  # now, while the workers are those just seen
            self._ready_route()
        seen = backend.see_workers()

        async def first_look():
            backend.feed(seen)

        client.sync(first_look)

    def _ready_route(self) -> None:
        """Every worker, those to come too, takes task streams (once per cluster: in a
        task, the root engine that sent it did it already)."""
        self._route_ready = True
        if self.nested and WorkerRuntime.of().task_service is not None:
            return
        try:
            self.client.register_plugin(TaskRoute(), name=TaskRoute.name)
        except OSError as exc:  # a worker that just died; the scheduler keeps it for the rest
            logger.info("hrl_tasks: the task route did not reach every worker: %r", exc)

    def _start(
        self, state, backend, retries, lost_worker_timeout, activate: bool, stall_warning_s=60.0
    ) -> None:
        """What every engine sets up, whatever its backend."""
        self.state = state
        self.backend = backend
        self.default_retries = RetryPolicy.coerce(retries, RetryPolicy())
        self.lost_worker_timeout = float(lost_worker_timeout)
        self.closed = False
        self.local_cache: dict = {}  # worker_local() objects in the driver
        self.local_cache_lock = threading.Lock()
        self.again_lock = threading.Lock()
        self.watch = WaitWatch(lambda: self.state.progress_at, self.story, stall_warning_s)
        self.route, self.nested, self.has_workers = "dask", False, False
        self._route_ready = False  # the workers take task streams (the direct route)
        self._page: EnginePage | None = None
        self.upkeep = None  # a ClusterUpkeep (adaptive.py) on a gateway's cluster
        # The launcher that started every process of the cluster for this one run, each
        # listening on the run's interface (``--runner``: "mpi", "slurm"); None otherwise.
        self.runner: str | None = None
        self._active_token = _Active.engine.set(self) if activate else None

    # --- construction: the deployment forms (`deployments`) ---------------------

    local = classmethod(deployments.local)
    connect = classmethod(deployments.connect)
    from_cluster = classmethod(deployments.from_cluster)
    batch = classmethod(deployments.batch)
    from_gateway = classmethod(deployments.from_gateway)

    def demand(self) -> int:
        """Threads' worth of work this engine has: plain tasks not done and stateful
        workers alive (what adaptive scaling sizes the cluster by)."""
        with self.backend.lock:
            return self.state.demand()

    @property
    def encrypted(self) -> bool:
        """Whether this cluster's connections are encrypted (`requires_encryption`):
        then what else its processes send one another in the clear is an exposure."""
        if self.client is None:  # everything in this process
            return False
        configured = dask.config.get("distributed.comm.require-encryption", False)
        return requires_encryption(
            self.client.security.require_encryption, configured, self.client.scheduler.address
        )

    @property
    def dashboard_link(self) -> str | None:
        """The address of the Dask dashboard."""
        return self.client.dashboard_link

    @property
    def page_link(self) -> str:
        """The address of the engine's live page: every engine task by worker and by
        name (the direct route's too, which Dask's dashboard does not see) and the
        stateful workers, refreshed every second; ``json`` after it gives the same as
        JSON. Served from the first time this is read, by this process, on 127.0.0.1,
        to requests that carry the link's random token and a loopback ``Host``
        (`hrl_tasks.scheduler.page`): pass the link on only to those who may read it."""
        with self.backend.lock:
            if self._page is None:
                self._page = EnginePage(self.view)
        return self._page.link

    def view(self) -> dict:
        """What the live page shows (`EngineState.view`), read under the engine's lock."""
        with self.backend.lock:
            return self.state.view()

    def own_cluster(self, cluster, close=None) -> None:
        """Close ``cluster`` with the engine, by ``close()`` (default: ``cluster.close``)."""
        self.cluster, self.close_cluster = cluster, close or cluster.close

    def close(self) -> None:
        """Close the engine; a local engine also stops its worker processes."""
        if self.closed:
            return
        self.closed = True
        if self.upkeep is not None:
            self.upkeep.close()
        self.watch.close()
        self.backend.close()
        handlers = {
            self.topic: self.backend.on_reports,
            worker_events.TOPIC: self.backend.on_cluster_event,
        }
        for topic, handler in handlers.items():
            if dask_compat.topic_handler(self.client, topic) == handler:  # not another engine's
                self.client.unsubscribe_topic(topic)
        self._deactivate()
        if self._page is not None:
            self._page.close()
        if self.owns_client:
            self.client.close()
        if self.close_cluster is not None:
            self.close_cluster()
        if self.held_settings is not None:
            self.held_settings.release()

    def _deactivate(self) -> None:
        if self._active_token is not None:
            try:
                _Active.engine.reset(self._active_token)
            except ValueError:
                _Active.engine.set(None)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- tasks --------------------------------------------------------------

    def submit(
        self,
        fn,
        *args,
        resources: dict | None = None,
        retries: RetryPolicy | int | None = None,
        speculative: bool | SpeculationPolicy = False,
        name: str | None = None,
        route: str | None = None,
        **kwargs,
    ) -> TaskRef:
        """Run ``fn(*args, **kwargs)`` on a worker.

        Args:
            fn: the function. TaskRefs among the arguments (also inside
                lists, tuples and dicts) become dependencies.
            resources: what the task needs while it runs, e.g. ``{"GPU": 1}``.
            retries: an int or a :class:`RetryPolicy`; covers exceptions and
                lost workers. Each attempt has a fresh key and can read its
                number from ``hrl_tasks.task_context().attempt``.
            speculative: allow backup copies when this task straggles: ``True``
                for the default :class:`SpeculationPolicy`, or a policy.
            name: groups statistics and the dashboard; default ``fn``'s name.
            route: ``"direct"``: the engine places the task and sends it to the
                worker itself, skipping Dask's scheduler; ``"dask"``: through the
                scheduler (a task whose inputs are Dask's goes that way anyway).
                Default: the engine's ``route``.

        Raises:
            ResourceError: if no worker could ever meet ``resources``.
        """
        ref, event = self._task(fn, args, kwargs, resources, retries, speculative, name, route)
        self.backend.push(event)
        return ref

    def map(self, fn, *iterables, **submit_kwargs) -> list[TaskRef]:
        """``[submit(fn, *args, **submit_kwargs) for args in zip(*iterables)]``, sent as one batch."""
        options = {k: submit_kwargs.pop(k, None) for k in ("resources", "retries", "name", "route")}
        speculative = submit_kwargs.pop("speculative", False)
        made = [
            self._task(
                fn,
                args,
                submit_kwargs,
                options["resources"],
                options["retries"],
                speculative,
                options["name"],
                options["route"],
            )
            for args in zip(*iterables, strict=True)
        ]
        if made:
            self.backend.push(*(event for _, event in made))
        return [ref for ref, _ in made]

    def _task(self, fn, args, kwargs, resources, retries, speculative, name, route=None):
        """A TaskRef and the event that submits it."""
        if not callable(fn):
            raise TypeError(f"submit needs a callable, got {fn!r}")
        if route is None:  # a nested task's children go the way it came
            parent = current_task() if self.nested else None
            route = self.route if parent is None else parent.route
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        if not self.has_workers:  # in-process: every route is the same call
            route = "dask"
        elif route == "direct" and not self._route_ready:
            self._ready_route()
        request = normalize_request(resources)
        self.check_resources(request)
        policy = RetryPolicy.coerce(retries, self.default_retries)
        speculation = SpeculationPolicy.coerce(speculative)
        name = name or getattr(fn, "__name__", "task")
        deps = self._inputs(args, kwargs)
        ref = self._new_ref(name, (fn, args, kwargs))
        ref.deps = tuple(d.task_id for d in deps)
        ref.route = route
        event = ev.SubmitTask(ref.task_id, name, ref.deps, request, policy, speculation, route)
        return ref, event

    def _inputs(self, args, kwargs) -> list[TaskRef]:
        deps: list[TaskRef] = []
        collect_refs((args, kwargs), deps)
        for dep in deps:
            if dep.direct_call:
                raise TypeError(
                    f"{dep.name!r} was a direct call: its result is not in Dask's cluster, so "
                    "it cannot be a task's input; pass its .result() instead (or pass it to "
                    "another direct call)"
                )
        return deps

    def _new_ref(
        self,
        name: str,
        payload: tuple | None,
        direct_call: bool = False,
        pinned: bool = False,
        keep: bool = False,
        recorded: bool = True,
    ) -> TaskRef:
        """A TaskRef whose outcome and arguments the backend records (unless not
        ``recorded``: a put's outcome is settled here, at once)."""
        ref = TaskRef(self, self.state.new_key(name), name, direct_call, pinned)
        parent = current_task()  # nested tasks report their durations to the root engine
        topic = self.topic if parent is None else parent.topic
        if payload is not None:
            payload = (*payload, topic)
            if not ref.pinned:  # a plain task can run again if its result is lost
                ref.recipe = payload
        if recorded:
            self.backend.add_task(ref.task_id, ref.outcome, payload, keep)
        return ref

    def put(self, value, broadcast: bool = False) -> TaskRef:
        """Place ``value`` in the cluster once; the TaskRef is a dependency for any number of tasks.

        Unlike passing ``value`` to each task, it travels to the cluster once and
        is not copied into every task's graph (the way to broadcast weights).
        For direct calls, use :meth:`share`.

        Args:
            broadcast: place a copy on every worker now, for values that tasks on
                every worker read: none of them waits to fetch it, and a holder
                that dies or freezes holds none of them up.
        """
        ref = self._new_ref("put", None, recorded=False)
        ref.outcome.set_result(self.backend.place(value, ref.task_id, broadcast))
        self.backend.push(ev.PutValue(ref.task_id))
        return ref

    @staticmethod
    def share(value) -> Shared:
        """``value`` for many direct calls, to leave the driver once (see :class:`Shared`)."""
        return Shared(value)

    def gather(self, refs: Iterable[TaskRef], timeout: float | None = None) -> list:
        """The results of ``refs``, in order, fetched in one batch.

        A finished task's result that was lost with its worker before it was read,
        and that Dask cannot compute again, is computed again by the engine (see
        :class:`~hrl_tasks.scheduler.errors.ResultsLost`); ``timeout`` covers that too.
        """
        refs = list(refs)
        deadline = None if timeout is None else time.monotonic() + timeout
        self.backend.raise_if_invalid()
        with self.watch.waiting(refs, "a gather"), task_wait():
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    values = self.backend.gather(refs, self.watch.bound(left))
                    break
                except ResultsLost as lost:
                    self._compute_again(refs, lost)
                except TimeoutError:
                    if self.watch.past_deadline():
                        raise self.watch.reached() from None
                    raise
        self.backend.raise_if_invalid()
        return values

    def _compute_again(self, refs: list[TaskRef], lost: ResultsLost) -> None:
        """Run again the tasks among ``refs`` whose results are ``lost.keys``: each ref
        gets a new outcome, which the task's next run settles. Re-raises ``lost`` when
        one of them cannot run again (a stateful worker's call: its state went too)."""
        with self.again_lock:  # two threads may see the same loss: one run again
            for ref in refs:
                if not ref.outcome.done() or ref.outcome.exception() is not None:
                    continue
                value = ref.outcome.result()
                if getattr(value, "key", None) not in lost.keys:
                    continue
                if ref.recipe is None:
                    raise lost
                ref.outcome = cf.Future()
                self.backend.add_task(ref.task_id, ref.outcome, ref.recipe)
                away = lost.address if lost.silent else None
                self.backend.push(ev.ResultLost(ref.task_id, value.key, away_from=away))

    def wait(
        self,
        refs: Iterable[TaskRef],
        timeout: float | None = None,
        return_when: str = "ALL_COMPLETED",
    ) -> tuple[set[TaskRef], set[TaskRef]]:
        """Wait for ``refs``; returns the sets ``(done, not_done)``.

        Args:
            return_when: ``"ALL_COMPLETED"`` or ``"FIRST_COMPLETED"``.
        """
        if return_when not in RETURN_WHEN:
            raise ValueError(
                f"return_when must be one of {sorted(RETURN_WHEN)}, got {return_when!r}"
            )
        by_outcome = {ref.outcome: ref for ref in refs}
        self.backend.raise_if_invalid()
        with self.watch.waiting(list(by_outcome.values()), "a wait"), task_wait():
            done, not_done = cf.wait(
                by_outcome, self.watch.bound(timeout), RETURN_WHEN[return_when]
            )
        self.backend.raise_if_invalid()
        unmet = not_done if return_when == "ALL_COMPLETED" else not done
        if unmet and by_outcome and self.watch.past_deadline():
            raise self.watch.reached()
        return {by_outcome[f] for f in done}, {by_outcome[f] for f in not_done}

    def as_completed(
        self, refs: Iterable[TaskRef], timeout: float | None = None
    ) -> Iterator[TaskRef]:
        """Yield ``refs`` as they finish, first finished first."""
        by_outcome = {ref.outcome: ref for ref in refs}
        finished = cf.as_completed(by_outcome, self.watch.bound(timeout))
        while True:
            with self.watch.waiting(list(by_outcome.values()), "as_completed"), task_wait():
                try:
                    outcome = next(finished, None)
                except cf.TimeoutError:
                    if self.watch.past_deadline():
                        raise self.watch.reached() from None
                    raise
            if outcome is None:
                return
            yield by_outcome[outcome]

    def time_limit(self, seconds: float | None):
        """A context in which every wait on this engine ends by ``seconds`` from now.

        A wait that reaches the limit raises :class:`DeadlineReached` (a
        ``TimeoutError``), whatever it waits for: what ``--stop-time`` and
        ``stop={"time_total_s": ...}`` use to end a run on time. None: no limit.
        """
        return self.watch.time_limit(seconds)

    def cancel(self, ref: TaskRef) -> None:
        """Cancel ``ref``'s task (``ref.cancel()``)."""
        try:
            ref.outcome.set_exception(cf.CancelledError(f"task {ref.name!r} was cancelled"))
        except cf.InvalidStateError:
            return  # finished meanwhile
        self.backend.push(ev.CancelTask(ref.task_id))

    # --- what TaskRefs ask ----------------------------------------------------

    def task_info(self, task_id: str, field: str):
        """One field of a task's state (``current``, ``attempts``, ``backups``), or None."""
        with self.backend.lock:
            task = self.state.tasks.get(task_id)
            found = None if task is None else getattr(task, field)
            return set(found) if isinstance(found, set) else found

    def validate(self) -> None:
        """Check the state machine's invariants now (see ``validate=``).

        Raises:
            InvalidState: naming each broken one.
        """
        self.backend.raise_if_invalid()
        with self.backend.lock:
            self.state.validate()

    def story(self, ref: TaskRef | str) -> str:
        """What happened to a task, for a person to read: ``print(engine.story(ref))``.

        The engine keeps the events it handled and the instructions it gave,
        per task while it knows the task and for the last 1,000 it let go. The
        story is the task's entries
        (its attempts, their starts and ends, retries, its resolution) and the
        cluster's events since it began, and the worker's half of each attempt
        sent on the engine's stream (received, queued, running in which thread,
        waiting, answered, kept, released: what the worker noted, as
        ``client.story`` adds the workers' to the scheduler's) and Dask's story of
        each attempt on Dask's route (the scheduler's and the workers' transitions,
        as ``client.story`` tells them, without waiting for a frozen worker: each
        part is asked for at most 2 s), oldest first with
        their age, then where the task is now: which attempts run where and for
        how long, or what it waits for.
        """
        task_id = ref if isinstance(ref, str) else ref.task_id
        with self.backend.lock:
            places, dask_keys = self.state.story_workers(task_id)
        told = []
        if isinstance(self.backend, DaskBackend):  # the in-process engine has no workers
            told = self.backend.worker_stories(places, dask_keys)
        with self.backend.lock:  # the backend's clock:
            lines = self.state.story(task_id, now=time.monotonic(), workers_told=told)
        name = ref if isinstance(ref, str) else f"{ref.name} ({task_id})"
        return "\n".join([f"story of {name}:", *lines])

    def future_of(self, ref: TaskRef):
        """The Dask future of ``ref``'s winning or current attempt, or None."""
        if ref.outcome.done() and ref.outcome.exception() is None:
            value = ref.outcome.result()
            return None if hasattr(value, "value") else value
        found = self.backend.result_of(self.task_info(ref.task_id, "current"))
        return None if hasattr(found, "value") else found

    def released(self, task_id: str) -> None:
        """Nobody holds the ref of ``task_id`` any more (its ``__del__``)."""
        if not self.closed:
            self.backend.released(task_id)

    # --- stateful workers ---------------------------------------------------

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
        self, handle: WorkerHandle, method: str, args, kwargs, speculation, direct, keep=False
    ) -> TaskRef:
        """``handle.call(...)``: a call of a stateful worker's method."""
        if not isinstance(method, str):
            raise TypeError(f"call needs a method name (a str), got {method!r}")
        name = f"{handle.label}.{method}"
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
            deps = self._inputs(args, kwargs)
        ref = self._new_ref(name, (method, args, kwargs), direct, pinned=True, keep=keep)
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

    # --- the workers --------------------------------------------------------

    def worker_addresses(self) -> list[str]:
        """The addresses of the cluster's workers now, as the scheduler knows them."""
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Block until the cluster has at least ``n`` workers (a batch cluster's jobs start).

        Raises:
            TimeoutError: if they are not there within ``timeout`` seconds.
        """
        self.client.wait_for_workers(n, timeout=timeout)

    def run_on_workers(self, fn, *args, workers: list[str] | None = None, on_error: str = "raise"):
        """Run ``fn(*args)`` once in each worker process (or those of ``workers``), outside
        the task queue; returns ``{address: result}``. ``on_error="ignore"`` skips workers
        that fail or leave meanwhile. For set-up and inspection, not for work."""
        return self.client.run(fn, *args, workers=workers, on_error=on_error)

    # --- resources ----------------------------------------------------------

    @property
    def ledger(self):
        """What each worker declared and what stateful workers hold (read only)."""
        return self.state.ledger

    def capacity(self) -> dict[str, dict[str, float]]:
        """Per worker, the resources it declares (a copy)."""
        with self.backend.lock:
            return {w: dict(declared) for w, declared in self.state.ledger.capacity.items()}

    @property
    def nthreads(self) -> dict[str, int]:
        """Threads per worker (read only)."""
        return self.state.nthreads

    def check_resources(self, request: dict) -> None:
        """Raise :class:`ResourceError` if no worker could ever meet ``request``."""
        if not request:
            return
        with self.backend.lock:
            capacity = dict(self.state.ledger.capacity)
        if not capacity:  # perhaps not looked at yet
            capacity = {w: declared for w, (_, declared) in self.backend.read_workers().items()}
        check_satisfiable(request, capacity)

    def resources(self) -> dict:
        """Per worker: what it declared, what stateful workers hold, what is free now."""
        free_now = self.run_on_workers(local_resources)
        with self.backend.lock:
            ledger = self.state.ledger
            return {
                w: {
                    "declared": dict(cap),
                    "held_by_objects": ledger.held_on(w),
                    "available": free_now.get(w, {}),
                }
                for w, cap in ledger.capacity.items()
            }

    def reaches_workers(self, timeout: float = 5.0) -> bool:
        """Whether this process can connect to every worker itself, as direct calls do.

        On the embedded cluster it always can; on a remote one (``connect``,
        ``from_cluster``) the workers may only be reachable by the scheduler.
        Asks each worker for its identity once and remembers the answer.
        """
        if self._reaches_workers is None:
            with self.backend.lock:
                addresses = sorted(self.nthreads)

            async def identities():
                calls = [self.client.rpc(address).identity() for address in addresses]
                await asyncio.wait_for(asyncio.gather(*calls), timeout)

            try:
                self.client.sync(identities)
                self._reaches_workers = True
            except (OSError, asyncio.TimeoutError) as exc:
                logger.warning("hrl_tasks: the workers cannot be called directly: %r", exc)
                self._reaches_workers = False
        return self._reaches_workers

    # --- statistics ---------------------------------------------------------

    def stats(self) -> dict:
        """Counters (submitted, finished, failed, retried, cancelled, workers_lost)
        and, per task name, the count and quantiles of execution durations.

        Durations are measured on the workers and arrive in batches every 0.1 s;
        they include the nested tasks that this engine's tasks submitted, while
        the counters count what this engine submitted itself.
        """
        with self.backend.lock:
            return self.state.stats.snapshot()

    def slow_workers(self) -> set[str]:
        """Workers known to be slow now: speculative work avoids them for a while."""
        with self.backend.lock:
            return self.state.slow_workers()
