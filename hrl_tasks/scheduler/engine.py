"""The engine's public API: :class:`Engine` on a Dask cluster, and ``current_engine()``.

An engine is a state machine (:mod:`~hrl_tasks.scheduler.state`, every
decision) and a backend that carries out its instructions
(:mod:`~hrl_tasks.scheduler.backend` on Dask, the in-process one of
:mod:`~hrl_tasks.scheduler.sync`). This module turns user calls into the state
machine's events and hands out :class:`TaskRef` and :class:`WorkerHandle`: the
task API here, the stateful workers' in :mod:`~hrl_tasks.scheduler.engine_objects`,
what the engine tells of its cluster in :mod:`~hrl_tasks.scheduler.engine_cluster`
(both base classes of :class:`Engine`), the deployment forms in
:mod:`~hrl_tasks.scheduler.deployments`.

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

import concurrent.futures as cf
import contextvars
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator

from dask.typing import no_default
from distributed import Client, get_client

from hrl_tasks.scheduler import dask_compat, deployments, settings, worker_events
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.backend import DaskBackend
from hrl_tasks.scheduler.clusters import HeldSettings
from hrl_tasks.scheduler.context import current_task, in_worker_task, task_wait
from hrl_tasks.scheduler.engine_cluster import ClusterFacts
from hrl_tasks.scheduler.engine_objects import StatefulWorkers
from hrl_tasks.scheduler.errors import EngineError, ResultsLost
from hrl_tasks.scheduler.metrics import MetricsReporter
from hrl_tasks.scheduler.page import EnginePage
from hrl_tasks.scheduler.resources import normalize_request
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.routes import default_route
from hrl_tasks.scheduler.runtime import WorkerRuntime
from hrl_tasks.scheduler.settings import validating
from hrl_tasks.scheduler.shared import Shared
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.task_service import TaskRoute
from hrl_tasks.scheduler.taskref import TaskRef, collect_refs
from hrl_tasks.scheduler.watch import WaitWatch

logger = logging.getLogger(__name__)
RETURN_WHEN = {"ALL_COMPLETED": cf.ALL_COMPLETED, "FIRST_COMPLETED": cf.FIRST_COMPLETED}
EVENTS_BACKSTOP_SWEEP_S = 5.0  # seconds between looks at the workers beside the events


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


class Engine(StatefulWorkers, ClusterFacts):
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
            scheduler to batch them; None: Dask's own. Dask's client waits up to
            10 ms; RL loops make one short round trip after another, and 1 ms took
            the round-trip latency here from 10.6 ms to 6.0 ms.
        validate: check the state machine's invariants after every event (slow;
            for tests). A broken invariant is raised by the next wait.
        stall_warning_s: a wait that sees no progress in the engine (no attempt
            started or ended, no worker came or went) for this long logs the
            story of what it waits for (:meth:`story`); None: never.
        route: how plain tasks reach the workers by default (``submit(route=...)``):
            ``"direct"`` placed by the engine and sent on a stream of its own to
            each worker, or ``"dask"`` through Dask's scheduler.

    The last five default to dask.config's ``hrl-tasks`` section (`settings`; set
    as any Dask setting: ~/.config/dask/, ``DASK_HRL_TASKS__*`` variables).
    """

    def __init__(
        self,
        client: Client,
        *,
        cluster=None,
        owns_client: bool = True,
        retries: RetryPolicy | int | None = None,
        lost_worker_timeout: float = no_default,
        send_interval_s: float | None = no_default,
        validate: bool | None = None,
        stall_warning_s: float | None = no_default,
        route: str | None = None,
    ):
        route = default_route(route)
        lost_worker_timeout = settings.value("lost-worker-timeout", lost_worker_timeout)
        send_interval_s = settings.value("send-interval", send_interval_s)
        stall_warning_s = settings.value("stall-warning", stall_warning_s)
        self.missing = dask_compat.missing_at_start()  # private parts of Dask gone, told once
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
        self._start(state, backend, retries, lost_worker_timeout, not nested, stall_warning_s)
        self.route, self.nested, self.has_workers = route, nested, True
        self._reaches_workers: bool | None = None  # see reaches_workers(); None: not asked
        client.subscribe_topic(self.topic, backend.on_reports)
        if not nested:  # a nested engine's scheduler has it: the root engine put it there
            worker_events.register(client)
            self.helpers.append(MetricsReporter.start(self))  # nested engines: the root counts
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
        # Threads that end with the engine: its MetricsReporter, a ClusterUpkeep (adaptive.py)
        self.helpers: list = []
        self.runner: str | None = None  # the launcher of this run's processes (--runner)
        self._active_token = _Active.engine.set(self) if activate else None

    # --- construction: the deployment forms (`deployments`) ---------------------

    local = classmethod(deployments.local)
    connect = classmethod(deployments.connect)
    from_cluster = classmethod(deployments.from_cluster)
    batch = classmethod(deployments.batch)
    from_gateway = classmethod(deployments.from_gateway)

    def own_cluster(self, cluster, close=None) -> None:
        """Close ``cluster`` with the engine, by ``close()`` (default: ``cluster.close``)."""
        self.cluster, self.close_cluster = cluster, close or cluster.close

    def close(self) -> None:
        """Close the engine; a local engine also stops its worker processes."""
        if self.closed:
            return
        self.closed = True
        for helper in self.helpers:
            helper.close()
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
        resources, retries, name, route = (
            submit_kwargs.pop(k, None) for k in ("resources", "retries", "name", "route")
        )
        options = (resources, retries, submit_kwargs.pop("speculative", False), name, route)
        made = [self._task(fn, a, submit_kwargs, *options) for a in zip(*iterables, strict=True)]
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
        if route not in settings.ROUTES:
            raise ValueError(f"route must be one of {settings.ROUTES}, got {route!r}")
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
        relay: bool = False,
        inputs: tuple = (),
    ) -> TaskRef:
        """A TaskRef whose outcome and arguments (``inputs``: a direct call's TaskRefs
        among them) the backend records (unless not ``recorded``: a put's outcome is
        settled here, at once)."""
        ref = TaskRef(self, self.state.new_key(name), name, direct_call, pinned)
        parent = current_task()  # nested tasks report their durations to the root engine
        topic = self.topic if parent is None else parent.topic
        if payload is not None:
            payload = (*payload, topic)
            if not ref.pinned:  # a plain task can run again if its result is lost
                ref.recipe = payload
        if recorded:
            self.backend.add_task(ref.task_id, ref.outcome, payload, keep, relay, inputs)
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

    def together(self):
        """A context manager: the calls and tasks this thread makes inside are handed
        to the engine in one go as it ends, and decided together. A round of direct
        calls made so, with ``relay=True``, goes to each host as one message
        (`hrl_tasks.scheduler.relay`). Waiting inside for one of them hands them over
        first. Example::

            with engine.together():
                refs = [w.call("sample", direct=True, relay=True) for w in workers]
        """
        return self.backend.holding()

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
        self.backend.hand_over_held()  # inside `together`: what is waited for goes first
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
        self.backend.hand_over_held()
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

        The task's entries as the engine noted them (kept while it knows the task and
        for the last 1,000 it let go: attempts, their starts and ends, retries, its
        resolution), the cluster's events since it began, the worker's half of each
        attempt on the engine's stream (received, queued, running, waiting, answered,
        kept, released, as ``client.story`` adds the workers' to the scheduler's) and
        Dask's story of each attempt on Dask's route (each part asked for at most 2 s:
        a frozen worker holds none up), oldest first with their age; then where the
        task is now: which attempts run where and for how long, or what it waits for.
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
