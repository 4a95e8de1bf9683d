"""The Dask backend: an :class:`Engine` on a ``distributed.Client``.

Tasks run through Dask's scheduler as ordinary tasks with fresh keys; the
engine watches each attempt from the driver and decides, with the pure rules
of :mod:`~hrl_tasks.scheduler.retry`, whether to run it again. Stateful workers
(:mod:`~hrl_tasks.scheduler.stateful`) live inside worker processes and are
called through tasks pinned to their worker.

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
import itertools
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator

import dask
import psutil
from distributed import Client, Future

from hrl_tasks.scheduler.clusters import check_versions, count_gpus
from hrl_tasks.scheduler.direct import DirectFuture, Shared
from hrl_tasks.scheduler.errors import EngineError
from hrl_tasks.scheduler.resources import Ledger, normalize_request
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.speculator import Speculator
from hrl_tasks.scheduler.stateful import ObjectRecord, WorkerGroup, WorkerHandle, object_keeper
from hrl_tasks.scheduler.stats import EngineStats
from hrl_tasks.scheduler.supervision import AttemptSupervision
from hrl_tasks.scheduler.taskref import TaskRef, collect_refs, resolve_refs
from hrl_tasks.scheduler.worker_side import (
    WorkerRuntime,
    current_task,
    in_worker_task,
    local_resources,
    run_task,
    task_wait,
)

logger = logging.getLogger(__name__)
_ACTIVE_ENGINE: contextvars.ContextVar[Engine | None] = contextvars.ContextVar(
    "hrl_tasks_active_engine", default=None
)
RETURN_WHEN = {"ALL_COMPLETED": cf.ALL_COMPLETED, "FIRST_COMPLETED": cf.FIRST_COMPLETED}
# Dask gives submissions less than ``fifo_timeout`` apart one generation, and a worker
# runs the newest of equal priority first (depth-first, for graphs). The engine's
# tasks are a queue: with no window, what was submitted first runs first, and a
# stateful worker's calls arrive in their order instead of waiting for their turn.
FIFO = "0 ms"


def current_engine() -> Engine:
    """The engine to submit to from here.

    Inside a task, an engine on the worker's own client (nested tasks); in the
    driver, the engine most recently opened in this context.

    Raises:
        EngineError: if there is none.
    """
    if in_worker_task():
        from distributed import get_worker

        return WorkerRuntime.of(get_worker()).nested_engine()
    engine = _ACTIVE_ENGINE.get()
    if engine is None or engine.closed:
        raise EngineError(
            "no engine is open here: create one with hrl_tasks.Engine.local() "
            "(or Engine.connect(address)) before calling current_engine()"
        )
    return engine


class Engine(AttemptSupervision):
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
        lost_worker_timeout: seconds within which a call pinned to a worker
            that disappeared is moved or failed.
        send_interval_s: how long the client may hold messages to the
            scheduler to batch them. Dask's client waits up to 10 ms; RL loops
            make one short round trip after another, and 1 ms took the
            round-trip latency here from 10.6 ms to 6.0 ms.
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
    ):
        stream = getattr(client, "scheduler_comm", None)
        if send_interval_s is not None and hasattr(stream, "interval"):
            stream.interval = min(stream.interval, float(send_interval_s))
        self.client = client
        self.cluster = cluster
        self.owns_client = owns_client
        self.default_retries = RetryPolicy.coerce(retries, RetryPolicy())
        self.lost_worker_timeout = float(lost_worker_timeout)
        self.closed = False
        self.topic = f"hrl-tasks-{uuid.uuid4().hex[:12]}"
        self._key_prefix = uuid.uuid4().hex[:16]
        self._key_counter = itertools.count()
        self._watch_lock = threading.Lock()
        self._to_watch: list[Future] = []
        self._settled: queue.SimpleQueue = queue.SimpleQueue()
        self._stats = EngineStats()
        self._stats_lock = threading.Lock()
        self._attempts: dict[str, TaskRef] = {}
        self.ledger = Ledger()
        self.ledger_changed = threading.Condition()
        self.objects: dict[str, ObjectRecord] = {}
        self._events: queue.Queue = queue.Queue()
        self.nthreads: dict[str, int] = {}
        self.speculator = Speculator(self)
        self.local_cache: dict = {}  # worker_local() objects in the driver
        self._reaches_workers: bool | None = None  # see reaches_workers(); None: not asked
        self.local_cache_lock = threading.Lock()
        self._refresh_ledger()
        client.subscribe_topic(self.topic, self._on_reports)
        if not in_worker_task():  # nested engines find lost workers by their sweep
            client.subscribe_topic("all", self._on_cluster_event)
        self._keeper = threading.Thread(
            target=object_keeper, args=(self,), name=f"{self.topic}-keeper", daemon=True
        )
        self._keeper.start()
        self._settler = threading.Thread(
            target=self._settle_loop, name=f"{self.topic}-settle", daemon=True
        )
        self._settler.start()
        self._active_token = _ACTIVE_ENGINE.set(self) if not in_worker_task() else None

    # --- construction -------------------------------------------------------

    @classmethod
    def local(
        cls,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        resources: dict | list[dict] | None = None,
        **cluster_kwargs,
    ) -> Engine:
        """Start an embedded ``distributed.LocalCluster`` with worker processes.

        Args:
            n_workers: worker processes (default: one per core, at most 4).
            threads_per_worker: threads in each (default 1).
            resources: what each worker declares. Default: ``CPU`` = its
                threads, ``GPU`` = the devices visible, ``memory`` = its
                memory limit in bytes. A list gives one dict per worker, for a
                heterogeneous cluster (its length sets ``n_workers``).
            **cluster_kwargs: passed to ``LocalCluster`` (e.g. ``dashboard_address``).
        """
        from distributed import LocalCluster, Nanny

        per_worker = resources if isinstance(resources, list) else None
        if per_worker is not None:
            n_workers = len(per_worker)
        n_workers = n_workers or max(1, min(4, os.cpu_count() or 1))
        threads = threads_per_worker or 1
        memory = int(psutil.virtual_memory().total // n_workers)

        def declared(extra: dict | None) -> dict:
            base = {"CPU": threads, "memory": memory}
            gpus = count_gpus()
            if gpus:
                base["GPU"] = gpus
            return {**base, **(extra or {})}

        cluster_kwargs.setdefault("dashboard_address", ":0")
        # Task errors reach the caller as exceptions; the worker logs need not repeat them.
        cluster_kwargs.setdefault("silence_logs", logging.CRITICAL)
        settings = {
            # Every lost worker reaches the engine, which retries within each task's budget.
            "distributed.scheduler.allowed-failures": 0,
            # The statistical profiler takes the GIL every 10 ms from Python-heavy
            # tasks such as env stepping (sampling ran markedly slower with it).
            "distributed.worker.profile.enabled": False,
            # Each server's event-loop tick (every 20 ms) and each nanny's memory check
            # (every 100 ms, two per worker in the driver) wake the driver's event loop
            # about 100 times a second when nothing happens; every wake-up takes the GIL
            # from the learner. Stalls of the loop (warned about after 3 s) and memory
            # overruns are still seen.
            "distributed.admin.tick.interval": "500ms",
            "distributed.worker.memory.monitor-interval": "500ms",
        }
        with dask.config.set(settings):  # worker processes take the config at their start
            cluster = LocalCluster(
                n_workers=0 if per_worker else n_workers,
                threads_per_worker=threads,
                processes=True,
                memory_limit=memory,
                resources=None if per_worker else declared(resources),
                **cluster_kwargs,
            )
            try:
                if per_worker:
                    for i, extra in enumerate(per_worker):
                        nthreads = int(extra.get("CPU", threads))
                        cluster.worker_spec[f"hrl-{i}"] = {
                            "cls": Nanny,
                            "options": {
                                "nthreads": nthreads,
                                "memory_limit": memory,
                                "resources": {**declared(None), "CPU": nthreads, **extra},
                            },
                        }
                    cluster.sync(cluster._correct_state)
                client = Client(cluster, direct_to_workers=True)
                client.wait_for_workers(n_workers, timeout=120)
            except BaseException:
                cluster.close()
                raise
        return cls(client, cluster=cluster)

    @classmethod
    def connect(cls, address: str, timeout: float = 30, **engine_kwargs) -> Engine:
        """Use an existing cluster by its scheduler address, e.g. ``tcp://host:8786``.

        The package must be importable on the workers; versions are checked.

        Args:
            address: the scheduler's address.
            timeout: seconds to wait for the scheduler to answer.
            **engine_kwargs: as for :class:`Engine` (``retries``, ``lost_worker_timeout``).

        Raises:
            OSError: if no scheduler answers at ``address`` within ``timeout``.
            EngineError: if the workers lack this package or have another version.
        """
        client = Client(address, timeout=timeout)
        try:
            check_versions(client)
        except BaseException:
            client.close()
            raise
        return cls(client, **engine_kwargs)

    @classmethod
    def from_cluster(cls, cluster, **engine_kwargs) -> Engine:
        """Use any Dask cluster object (``LocalCluster``, dask-jobqueue's ``SLURMCluster``...).

        The cluster stays open when the engine closes; close it yourself.
        """
        client = Client(cluster)
        return cls(client, **engine_kwargs)

    @property
    def dashboard_link(self) -> str | None:
        """The address of the Dask dashboard."""
        return self.client.dashboard_link

    def close(self) -> None:
        """Close the engine; a local engine also stops its worker processes."""
        if self.closed:
            return
        self.closed = True
        self._events.put(None)
        self._settled.put(None)
        handlers = {self.topic: self._on_reports, "all": self._on_cluster_event}
        for topic, handler in handlers.items():
            if self.client._event_handlers.get(topic) == handler:  # not another engine's
                self.client.unsubscribe_topic(topic)
        if self._active_token is not None:
            try:
                _ACTIVE_ENGINE.reset(self._active_token)
            except ValueError:
                _ACTIVE_ENGINE.set(None)
        if self.owns_client:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

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

        Raises:
            ResourceError: if no worker could ever meet ``resources``.
        """
        ref = self._prepare(fn, args, kwargs, resources, retries, speculative, name)
        ref._start_attempt(0)
        if ref.speculation is not None:
            self.speculator.track(ref)
        return ref

    def _prepare(self, fn, args, kwargs, resources, retries, speculative, name) -> TaskRef:
        """A TaskRef whose attempts will run ``fn``; not launched yet."""
        if not callable(fn):
            raise TypeError(f"submit needs a callable, got {fn!r}")
        request = normalize_request(resources)
        self.check_resources(request)
        policy = RetryPolicy.coerce(retries, self.default_retries)
        name = name or getattr(fn, "__name__", "task")
        deps: list[TaskRef] = []
        collect_refs((args, kwargs), deps)

        def launch(attempt: int):
            real_args, used = resolve_refs(args)
            real_kwargs, used_kw = resolve_refs(kwargs)
            future = self.run(
                fn, real_args, real_kwargs, name=name, attempt=attempt, resources=request,
                workers=self.speculator.healthy_workers() if speculative else None,
            )  # fmt: skip
            return future, {**used, **used_kw}

        ref = TaskRef(self, name, launch, deps)
        ref.policy = policy
        ref.call_args = (fn, args, kwargs, request)
        ref.speculation = SpeculationPolicy.coerce(speculative)
        self._count("submitted")
        return ref

    def _spec(self, name: str, attempt: int, resources: dict, internal: bool = False) -> dict:
        parent = current_task()  # nested tasks report their durations to the root engine
        return {
            "key": self.new_key(name),
            "name": name,
            "attempt": attempt,
            "resources": resources or {},
            "topic": self.topic if parent is None else parent.topic,
            "internal": internal,
        }

    def run(
        self,
        fn,
        args: tuple,
        kwargs: dict,
        *,
        name: str,
        attempt: int = 0,
        resources: dict | None = None,
        workers: list[str] | None = None,
        internal: bool = False,
        priority: int = 0,
    ) -> Future:
        """Submit one attempt through :func:`run_task` with a fresh key; a Dask future.

        The building block of tasks and stateful-worker calls; users call :meth:`submit`.

        Args:
            workers: run only there (a stateful worker's home, a backup's target).
            internal: the engine's own housekeeping (never hit by fault injection).
            priority: Dask priority; higher runs first (backups jump the queue).
        """
        spec = self._spec(name, attempt, resources, internal)
        pin = {} if workers is None else {"workers": workers, "allow_other_workers": False}
        return self.client.submit(
            run_task, fn, spec, args, kwargs,
            key=spec["key"], pure=False, resources=resources or None, priority=priority,
            fifo_timeout=FIFO, **pin,
        )  # fmt: skip

    def cancel_futures(self, futures: list) -> None:
        """Cancel attempts from any thread, the client's event loop included, without waiting."""
        dask_futures = []
        for future in futures:
            if isinstance(future, DirectFuture):
                future.cancel()
            else:
                dask_futures.append(future)
        if dask_futures:
            self.client.loop.add_callback(self.client._cancel, dask_futures)

    def new_key(self, name: str) -> str:
        """A fresh Dask key for an attempt of task ``name`` (Dask groups keys by ``name``)."""
        return f"{name}-{self._key_prefix}{next(self._key_counter):08x}"

    def put(self, value) -> TaskRef:
        """Place ``value`` in the cluster once; the TaskRef is a dependency for any number of tasks.

        Unlike passing ``value`` to each task, it travels to the cluster once and
        is not copied into every task's graph (the way to broadcast weights).
        For direct calls, use :meth:`share`.
        """
        (future,) = self.client.scatter([value], hash=False)  # a list: not a dict's items
        ref = TaskRef(self, "put", lambda attempt: (future, {}), [])
        ref._future = future
        ref._outcome.set_result(future)
        return ref

    @staticmethod
    def share(value) -> Shared:
        """``value`` for many direct calls, to leave the driver once (see :class:`Shared`)."""
        return Shared(value)

    def reaches_workers(self, timeout: float = 5.0) -> bool:
        """Whether this process can connect to every worker itself, as direct calls do.

        On the embedded cluster it always can; on a remote one (``connect``,
        ``from_cluster``) the workers may only be reachable by the scheduler.
        Asks each worker for its identity once and remembers the answer.
        """
        if self._reaches_workers is None:
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

    def map(self, fn, *iterables, **submit_kwargs) -> list[TaskRef]:
        """``[submit(fn, *args, **submit_kwargs) for args in zip(*iterables)]``, sent as one batch."""
        options = {k: submit_kwargs.pop(k, None) for k in ("resources", "retries", "name")}
        speculative = submit_kwargs.pop("speculative", False)
        refs = [
            self._prepare(fn, args, submit_kwargs, options["resources"], options["retries"],
                          speculative, options["name"])
            for args in zip(*iterables, strict=True)
        ]  # fmt: skip
        if not refs:
            return refs
        request = refs[0].call_args[3]
        speculative = refs[0].speculation is not None
        workers = self.speculator.healthy_workers() if speculative else None
        pin = {} if workers is None else {"workers": workers, "allow_other_workers": False}
        specs, arg_lists, kwarg_lists, used = [], [], [], []
        for ref in refs:
            real_args, used_args = resolve_refs(ref.call_args[1])
            real_kwargs, used_kw = resolve_refs(ref.call_args[2])
            specs.append(self._spec(ref.name, 0, request))
            arg_lists.append(real_args)
            kwarg_lists.append(real_kwargs)
            used.append({**used_args, **used_kw})
        futures = self.client.map(
            run_task, [fn] * len(refs), specs, arg_lists, kwarg_lists,
            key=[spec["key"] for spec in specs], pure=False, resources=request or None,
            fifo_timeout=FIFO, **pin,
        )  # fmt: skip
        for ref, future, deps_used in zip(refs, futures, used, strict=True):
            ref._start_attempt(0, (future, deps_used))
            if speculative:
                self.speculator.track(ref)
        return refs

    def gather(self, refs: Iterable[TaskRef], timeout: float | None = None) -> list:
        """The results of ``refs``, in order, fetched in one batch."""
        refs = list(refs)
        with task_wait():
            if all(r.call_info is None and r.future is not None for r in refs):
                try:  # fast path, as in TaskRef.result
                    return self.client.gather([r.future for r in refs])
                except Exception:
                    pass  # some attempt failed or was replaced: settle each below
            deadline = None if timeout is None else time.monotonic() + timeout
            futures = []
            for ref in refs:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                futures.append(ref._wait_outcome(left))
            in_cluster = [f for f in futures if not isinstance(f, DirectFuture)]
            fetched = iter(self.client.gather(in_cluster) if in_cluster else ())
            return [f.result() if isinstance(f, DirectFuture) else next(fetched) for f in futures]

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
        by_outcome = {ref._outcome: ref for ref in refs}
        with task_wait():
            done, not_done = cf.wait(by_outcome, timeout, RETURN_WHEN[return_when])
        return {by_outcome[f] for f in done}, {by_outcome[f] for f in not_done}

    def as_completed(
        self, refs: Iterable[TaskRef], timeout: float | None = None
    ) -> Iterator[TaskRef]:
        """Yield ``refs`` as they finish, first finished first."""
        by_outcome = {ref._outcome: ref for ref in refs}
        finished = cf.as_completed(by_outcome, timeout)
        while True:
            with task_wait():
                outcome = next(finished, None)
            if outcome is None:
                return
            yield by_outcome[outcome]

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
        record = ObjectRecord(
            engine=self,
            obj_id=f"{name or getattr(cls_or_factory, '__name__', 'object')}-{uuid.uuid4().hex[:8]}",
            name=name or getattr(cls_or_factory, "__name__", "object"),
            factory=cls_or_factory,
            args=args,
            kwargs=kwargs,
            request=normalize_request(resources),
            strategy=strategy,
            max_restarts=max_restarts,
            reissue_calls=reissue_calls,
            label=label or "",
        )
        self.check_resources(record.request)
        record.start()
        self.objects[record.obj_id] = record
        return WorkerHandle(record)

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

    # --- resources ----------------------------------------------------------

    def check_resources(self, request: dict) -> None:
        """Raise :class:`ResourceError` if no worker could ever meet ``request``."""
        if request:
            with self.ledger_changed:
                if not self.ledger.capacity:
                    self._refresh_ledger()
                self.ledger.check(request)

    def resources(self) -> dict:
        """Per worker: what it declared, what stateful workers hold, what is free now."""
        free_now = self.client.run(local_resources)
        with self.ledger_changed:
            return {
                w: {
                    "declared": dict(cap),
                    "held_by_objects": self.ledger.held_on(w),
                    "available": free_now.get(w, {}),
                }
                for w, cap in self.ledger.capacity.items()
            }

    def _refresh_ledger(self) -> None:
        """Read the workers and what they declare from the scheduler."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        held = self.client.get_metadata(["hrl-tasks", "held"], default={}) or {}
        with self.ledger_changed:
            for addr in set(self.ledger.capacity) - set(workers):
                self.ledger.remove_worker(addr)
            for addr in set(self.nthreads) - set(workers):
                self.nthreads.pop(addr, None)
            for addr, info in workers.items():
                self.nthreads[addr] = int(info.get("nthreads", 1))
                declared = dict(info.get("resources") or {})
                for request in (held.get(addr) or {}).values():
                    for k, v in request.items():
                        declared[k] = declared.get(k, 0.0) + v
                self.ledger.capacity[addr] = declared
            self.ledger_changed.notify_all()

    # --- statistics ---------------------------------------------------------

    def stats(self) -> dict:
        """Counters (submitted, finished, failed, retried, cancelled, workers_lost)
        and, per task name, the count and quantiles of execution durations.

        Durations are measured on the workers and arrive in batches every 0.1 s;
        they include the nested tasks that this engine's tasks submitted, while
        the counters count what this engine submitted itself.
        """
        with self._stats_lock:
            return self._stats.snapshot()

    def _count(self, counter: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats.count(counter, n)

    def _note_cancelled(self, ref: TaskRef) -> None:
        self._count("cancelled")
        if ref.call_info is not None:
            ref.call_info[0].skip(ref.call_info[1])

    def _on_reports(self, event) -> None:
        """Start and end events from the workers (on the client's event loop)."""
        _, events = event
        now = time.monotonic()
        for kind, key, name, worker, elapsed, age in events:
            if kind == "start":
                self.speculator.on_start(key, worker, now - age)
            else:
                with self._stats_lock:
                    self._stats.record_duration(name, elapsed)
                self.speculator.on_end(key, name, worker, elapsed, now - age)

    def _on_cluster_event(self, event) -> None:
        msg = event[1]
        if isinstance(msg, dict) and msg.get("action") in ("add-worker", "remove-worker"):
            self._events.put(msg)
