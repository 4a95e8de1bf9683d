"""Every use of a private part of ``distributed`` (and the one of ``dask_gateway``'s
client), in one place.

Each function says why it needs the internal and which public API would
replace it. The range of ``distributed`` these were read from and tested with
is pinned in ``setup.cfg``; after an upgrade, run ``pytest tests/scheduler``
(``test_a_cancelled_running_task_gives_its_thread_to_the_next`` and
``tests/scheduler/test_direct.py`` exercise the worker-side internals).

A private part that a new ``distributed`` removes degrades, never breaks:
:data:`PARTS` lists each with what happens without it, chosen by feature
detection (:func:`have`) in the process that needs it: a public fallback
(``"fallback"``), a feature switched off (``"off"``), or a clear error where the
feature is asked for (``"error"``). Each is told once per process, as a warning
(:func:`gone`); an engine lists those missing in its own process when it starts
(:func:`missing_at_start`). ``HRL_TASKS_WITHOUT_PRIVATE`` (names, comma-separated)
has a process act as if those were gone: read by the worker processes too
(``distributed.nanny.environ`` passes it to them), for the tests that remove each
in turn (``tests/test_private_parts.py``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass

from distributed import Client, Future

from hrl_tasks.scheduler.errors import EngineError

logger = logging.getLogger(__name__)
WITHOUT_VARIABLE = "HRL_TASKS_WITHOUT_PRIVATE"
TESTED = "distributed>=2024.8.0,<2026.9"  # as setup.cfg pins it


@dataclass(frozen=True)
class PrivatePart:
    """A private part of ``distributed`` the engine uses, and what happens without it.

    ``where``: ``"module:attribute.attribute"`` to look it up at start, or None for
    an instance's attribute (looked for where it is used)."""

    name: str
    where: str | None
    gone: str  # "fallback", "off" or "error"
    then: str


PARTS = {
    part.name: part
    for part in (
        PrivatePart(
            "Client.scheduler_comm.interval",
            "distributed.batched:BatchedSend",
            "off",
            "the client holds its messages to the scheduler for Dask's 10 ms: round trips "
            "on Dask's route take longer",
        ),
        PrivatePart(
            "Client._event_handlers",
            None,
            "off",
            "a closing engine leaves its topics subscribed on a client it does not own",
        ),
        PrivatePart(
            "Client._cancel",
            "distributed:Client._cancel",
            "fallback",
            "Client.cancel(asynchronous=True)",
        ),
        PrivatePart(
            "Future._exception",
            "distributed:Future._exception",
            "fallback",
            "Future.add_done_callback, the outcome read on Dask's callback thread",
        ),
        PrivatePart(
            "SpecCluster._correct_state",
            "distributed.deploy.spec:SpecCluster._correct_state",
            "fallback",
            "the embedded cluster's workers start by cluster.scale(), and a worker that "
            "fails to start is seen as a time-out; one of workers with different "
            "resources (Engine.local(resources=[...])) cannot start: an error says so "
            f"and names the tested range ({TESTED})",
        ),
        PrivatePart(
            "utils._forkserver_preload_set",
            "distributed.utils:_forkserver_preload_set",
            "off",
            "the driver imports distributed's optional packages (pandas among them) "
            "when the embedded cluster starts: a slower start",
        ),
        PrivatePart(
            "deploy.local.nprocesses_nthreads",
            "distributed.deploy.local:nprocesses_nthreads",
            "fallback",
            "the same split computed here (about the square root of the cores)",
        ),
        PrivatePart(
            "JobQueueCluster._dummy_job",
            None,
            "fallback",
            "the processes per job read from the job script's --nworkers (else 1)",
        ),
        PrivatePart(
            "worker._worker_cvar",
            "distributed.worker:_worker_cvar",
            "fallback",
            "plain tasks go by Dask's route by default and direct calls as scheduled "
            "calls (keep=True ignored): in the engine's own threads get_worker(), and "
            "so nested tasks and the objects' calls, would fail",
        ),
        PrivatePart(
            "threadpoolexecutor.thread_state",
            "distributed.threadpoolexecutor:thread_state",
            "fallback",
            "a task thread known by the task key distributed's thread state holds",
        ),
        PrivatePart(
            "threadpoolexecutor.secede",
            "distributed.threadpoolexecutor:secede",
            "off",
            "a task's second and later waits hold its thread (the first leaves it)",
        ),
        PrivatePart(
            "ThreadPoolExecutor._adjust_thread_count",
            "distributed.threadpoolexecutor:ThreadPoolExecutor._adjust_thread_count",
            "off",
            "a cancelled task that still runs keeps its thread until it returns",
        ),
        PrivatePart(
            "worker_state_machine.SecedeEvent",
            "distributed.worker_state_machine:SecedeEvent",
            "off",
            "a cancelled task that still runs keeps its thread until it returns",
        ),
        PrivatePart(
            "Scheduler.bulk_schedule_unrunnable_after_adding_worker",
            "distributed.scheduler:Scheduler.bulk_schedule_unrunnable_after_adding_worker",
            "off",
            "a Dask-route task waiting for resources an object gave back starts when the "
            "scheduler next looks (a worker joins), not at once; the default route is "
            "placed by the engine and does not wait",
        ),
        PrivatePart(
            "core.send_recv",
            "distributed.core:send_recv",
            "fallback",
            "the request written and its reply read on the comm",
        ),
        PrivatePart(
            "scheduler.heartbeat_interval",
            "distributed.scheduler:heartbeat_interval",
            "fallback",
            "the scheduler's rule computed here",
        ),
        PrivatePart(
            "comm.tcp.TCP.stream",
            "distributed.comm.tcp:TCP",
            "fallback",
            "task streams go through Dask's comm instead of a socket taken over from it",
        ),
        PrivatePart(
            "utils.sync",
            "distributed.utils:sync",
            "fallback",
            "asyncio.run_coroutine_threadsafe on the worker's asyncio loop",
        ),
        PrivatePart(
            "Gateway._loop_runner",
            None,
            "off",
            "dask-gateway may print 'Exception ignored in Gateway.__del__' when a "
            "closed gateway client is collected",
        ),
    )
}


def without() -> set[str]:
    """The names this process is to act without (``HRL_TASKS_WITHOUT_PRIVATE``)."""
    return {n.strip() for n in os.environ.get(WITHOUT_VARIABLE, "").split(",") if n.strip()}


@functools.cache
def have(name: str) -> bool:
    """Whether the private part ``name`` (a key of :data:`PARTS`) is there to use;
    told once (:func:`gone`) if not. An instance's attribute counts as there until
    its user finds it missing."""
    part = PARTS[name]
    found = name not in without() and (part.where is None or _found(part.where))
    if not found:
        gone(name)
    return found


def _found(where: str) -> bool:
    module, _, path = where.partition(":")
    try:
        target = importlib.import_module(module)
        for attribute in path.split("."):
            target = getattr(target, attribute)
    except (ImportError, AttributeError):
        return False
    return True


@functools.cache
def gone(name: str) -> None:
    """Warn, once per process, that ``name`` is missing and what happens without it."""
    import distributed

    part = PARTS[name]
    logger.warning(
        "hrl_tasks: distributed %s has no %s (tested: %s); %s: %s",
        distributed.__version__,
        name,
        TESTED,
        {"fallback": "instead", "off": "switched off", "error": "so"}[part.gone],
        part.then,
    )


def missing_at_start() -> list[str]:
    """The private parts that this process cannot use (each told once)."""
    return [name for name in PARTS if not have(name)]


# --- the client (driver side) ---------------------------------------------------


def set_send_interval(client: Client, seconds: float) -> None:
    """Let the client batch its messages to the scheduler for at most ``seconds``.

    Why: RL loops make one short round trip after another; the client's
    ``BatchedSend`` waits up to 10 ms. No public setting exists for the client's
    stream (``distributed.comm.batched`` config is not read for it).
    """
    stream = getattr(client, "scheduler_comm", None)
    if not hasattr(stream, "interval"):
        gone("Client.scheduler_comm.interval")
    elif have("Client.scheduler_comm.interval"):
        stream.interval = min(stream.interval, float(seconds))


def topic_handler(client: Client, topic: str):
    """The handler the client calls for ``topic`` now, or ``None``.

    Why: a client keeps one handler per topic, so an engine must not
    unsubscribe another engine's handler on the same client. Public
    replacement: none (``Client.unsubscribe_topic`` takes no handler).
    """
    handlers = getattr(client, "_event_handlers", None)
    if handlers is None or not have("Client._event_handlers"):
        gone("Client._event_handlers")
        return None
    return handlers.get(topic)


async def cancel(client: Client, futures: list[Future]) -> None:
    """Cancel ``futures`` from the client's event loop.

    Why: ``Client.cancel`` blocks until done and cannot be called from the
    loop's own thread, where the engine's state machine runs.
    """
    if have("Client._cancel"):
        await client._cancel(futures)  # noqa: SLF001
    else:
        await client.cancel(futures, asynchronous=True)


async def outcome(future: Future) -> tuple[str, BaseException | None]:
    """Wait for ``future`` on the client's loop; ``(status, error)`` without fetching data.

    Why: ``Future.exception()`` is blocking, and ``await future`` fetches the
    result. Public replacement: none for a non-asynchronous client.
    """
    if have("Future._exception"):
        error = await future._exception()  # noqa: SLF001
        return future.status, error
    loop = asyncio.get_running_loop()
    settled = loop.create_future()

    def done(finished):  # on Dask's callback thread, where blocking is allowed
        try:
            error = None if finished.status == "finished" else finished.exception()
        except BaseException as exc:  # cancelled
            error = exc
        loop.call_soon_threadsafe(lambda: settled.done() or settled.set_result(error))

    future.add_done_callback(done)
    error = await settled
    return future.status, error


# --- messages ---------------------------------------------------------------------

HEADER_KEYS = (
    "num-sub-frames",
    "split-num-sub-frames",
    "split-offsets",
    "sub-header",
    "sub-headers",
    "type-serialized",
    "parent-type-serialized",
    "pickle-protocol",
    "pickled-obj",
    "frame-lengths",
    "is-collection",
    "data-header",
    "heartbeat-interval",
)
"""Map keys of ``distributed``'s messages that are not identifiers (protocol/core.py,
serialize.py, numpy.py; the scheduler's heartbeat reply)."""


def pin_header_keys() -> tuple[str, ...]:
    """Intern :data:`HEADER_KEYS` for the life of the process; returns them.

    Why: msgpack interns every map key it reads. CPython interns only names
    that look like identifiers when it compiles code, so a header key such as
    ``"num-sub-frames"`` is held by nothing else: each message adds it to the
    table of interned strings and leaves a dead slot when it is freed. When dead
    slots fill the table, CPython rebuilds it at three times the live count,
    and a worker here holds more than 43,690 live interned strings (the
    names of torch, numpy and distributed), so the first rebuild doubled it to
    2**18 slots: a 3.8 MB block, +2 MB resident in every process, about 10
    minutes into a run at a search's message rate. A key interned here is found
    at each message, not added, so messages leave no dead slots. Public
    replacement: none.
    """
    return tuple(sys.intern(key) for key in HEADER_KEYS)


# --- clusters ---------------------------------------------------------------------


def start_added_workers(cluster, alike: bool = True) -> None:
    """Start the workers just added to a ``SpecCluster``'s ``worker_spec``, now,
    raising if one does not start.

    Why: ``LocalCluster`` takes one resource dict for all workers; a
    heterogeneous cluster adds specs one by one; and ``cluster.scale()`` only
    schedules the start. Public replacement: ``cluster.scale()`` then waiting
    for the workers, which takes no per-worker options and says nothing of a
    worker that failed to start (the failure is lost in a task never awaited).
    """
    if have("SpecCluster._correct_state"):
        cluster.sync(cluster._correct_state)  # noqa: SLF001
    elif alike:  # the caller waits for them to come
        cluster.scale(len(cluster.worker_spec))
    else:
        raise EngineError(
            "workers with different resources need SpecCluster._correct_state, which "
            f"this distributed does not have: install {TESTED}, or give every worker "
            "the same resources"
        )


def preload_forkserver(modules: list[str]) -> None:
    """Have worker processes forked from a server that has imported ``modules`` once,
    instead of each spawned process importing them again.

    Why: the first time distributed is asked for a ``forkserver`` context,
    ``distributed.utils.get_mp_context`` imports every package of its optional
    list (pandas among them) into the calling process, to preload them in the
    server. The driver has no use for those. Public replacement: none (no setting
    for the server's preload list).
    """
    import multiprocessing

    from distributed import utils

    if have("utils._forkserver_preload_set"):
        utils._forkserver_preload_set = True  # noqa: SLF001
    multiprocessing.get_context("forkserver").set_forkserver_preload(modules)


def default_processes(cores: int) -> int:
    """Worker processes for ``cores`` cores when none are given, as Dask splits them
    (about the square root of the cores; dask-jobqueue splits a job the same way).

    Why: ``distributed.deploy.local.nprocesses_nthreads`` is not exported. Public
    replacement: none.
    """
    if have("deploy.local.nprocesses_nthreads"):
        from distributed.deploy.local import nprocesses_nthreads

        return nprocesses_nthreads(cores)[0]
    if cores <= 4:  # Dask's split (distributed.deploy.local.nprocesses_nthreads)
        return cores
    processes = math.ceil(math.sqrt(cores))
    while cores % processes:
        processes += 1
    return processes


def jobqueue_processes(cluster) -> int:
    """Worker processes per job of a dask-jobqueue cluster.

    Why: the split is known only to the cluster's template job (``_dummy_job``).
    Public replacement: none (the job script shows it only as text).
    """
    job = getattr(cluster, "_dummy_job", None)
    if job is not None and have("JobQueueCluster._dummy_job"):
        return int(job.worker_processes)
    gone("JobQueueCluster._dummy_job")
    found = re.search(r"--(?:nworkers|nprocs)[ =](\d+)", cluster.job_script())
    return int(found.group(1)) if found else 1


# --- the workers --------------------------------------------------------------------


def worker_context(worker):
    """Make ``get_worker()`` return ``worker`` in this thread; returns a reset token.

    Why: direct calls run in threads of the engine's own, not Dask's pool, and
    the code they run may call ``get_worker()`` (Dask's actors do the same).
    """
    if not have("worker._worker_cvar"):
        return None
    from distributed.worker import _worker_cvar

    return _worker_cvar.set(worker)


def engine_threads_know_their_worker() -> bool:
    """Whether code in the engine's own threads of a worker (the task stream's, the
    objects' direct calls) can call ``get_worker()``: see :func:`worker_context`."""
    return have("worker._worker_cvar")


def reset_worker_context(token) -> None:
    if token is None:  # not set: see worker_context
        return
    from distributed.worker import _worker_cvar

    _worker_cvar.reset(token)


def running_task_key() -> str | None:
    """The key of the Dask task this thread executes, or ``None``.

    Why: ``get_worker()`` also answers in the worker's event loop and in
    direct-call threads; only a task thread of the pool has a key. Public
    replacement: none (``distributed.get_task_key`` raises outside a task in
    some versions).
    """
    from distributed.utils import thread_state

    key = getattr(thread_state, "key", None)
    if key is None or not have("threadpoolexecutor.thread_state"):
        return key
    from distributed.threadpoolexecutor import thread_state as pool_state

    return key if hasattr(pool_state, "executor") else None


def leave_pool_again() -> None:
    """Leave the worker's thread pool once more after ``rejoin()`` (Dask allows one
    ``secede()`` per task, which tells the scheduler; later waits only free the thread).

    Why: a task that waits several times must not hold a pool thread in each wait.
    """
    if not have("threadpoolexecutor.secede"):
        return
    from distributed.threadpoolexecutor import secede as pool_secede

    pool_secede(adjust=True)


def end_thread_after_task() -> None:
    """Let the calling pool thread end after its task instead of taking the next one.

    Why: a detached (cancelled, still running) task's thread was replaced in the
    pool; it must not come back as an extra thread.
    """
    if not have("threadpoolexecutor.thread_state"):
        return
    from distributed.threadpoolexecutor import thread_state as pool_state

    pool_state.proceed = False


def task_state(worker, key: str):
    """``(state, previous)`` of task ``key`` in the worker's state machine, or ``None``."""
    found = worker.state.tasks.get(key)
    return None if found is None else (found.state, found.previous)


def detach_thread(worker, thread, claim) -> bool:
    """Take ``thread`` out of the worker's thread pool and start a replacement.

    Why: Dask cannot stop a running task; a copy that lost its race would hold
    its thread to its end. This does from outside what ``secede()`` does from
    inside the task. Public replacement: none (distributed issue 391).

    Args:
        claim: called under the pool's lock once the pool is found; the thread
            is taken out only if it returns True.

    Returns:
        Whether the thread was taken out.
    """
    if not (
        have("ThreadPoolExecutor._adjust_thread_count") and have("worker_state_machine.SecedeEvent")
    ):
        return False
    from distributed.threadpoolexecutor import threads_lock

    with threads_lock:
        for executor in worker.executors.values():
            threads = getattr(executor, "_threads", ())
            if thread in threads and hasattr(executor, "_rejoin_list"):
                if not claim():
                    return False
                threads.discard(thread)
                executor._adjust_thread_count()  # noqa: SLF001
                return True
    return False


def report_seceded(worker, key: str) -> None:
    """Tell the worker's state machine that task ``key`` left the pool (as ``secede()`` does).

    Why: for a cancelled task that still runs, the worker's state machine
    then frees its thread slot; ``secede()`` can only be called from inside the task.
    """
    from distributed.worker_state_machine import SecedeEvent

    stimulus = f"hrl-detach-{time.time()}"
    worker.handle_stimulus(SecedeEvent(key=key, compute_duration=0.0, stimulus_id=stimulus))


def lend_resources(worker, request: dict, sign: int) -> None:
    """Add (``sign=+1``) or take back (``-1``) ``request`` to what the worker has free now.

    Why: Dask keeps a seceded task's resources held (distributed issue 6565), so
    a parent waiting for its children would starve them. Runs on the worker's
    event loop. Public replacement: none; the issue's fix would remove the need.
    """
    available = worker.state.available_resources
    for name, amount in request.items():
        available[name] = available.get(name, 0.0) + sign * amount


def free_resources(worker) -> dict:
    """What the worker has free right now."""
    return dict(worker.state.available_resources)


async def change_supply(worker, delta: dict) -> dict:
    """Add ``delta`` to the resources ``worker`` advertises (negative to hold them).

    ``Worker.set_resources`` is public; the totals it starts from are the worker
    state machine's.
    """
    totals = dict(worker.state.total_resources)
    for name, amount in delta.items():
        totals[name] = totals.get(name, 0.0) + amount
    await worker.set_resources(**totals)
    return totals


def workers_and_holdings(scheduler, path: list) -> tuple[dict, dict]:
    """Each worker's ``(threads, resources it advertises)`` and the metadata at
    ``path``, read in one step of the scheduler's event loop.

    Why: a holding changes the two in turn (see `change_supply`); two separate
    reads (``scheduler_info``, then ``get_metadata``) could see the supply fall
    before the holding was recorded, and count the held resources twice.
    Public replacement: none.
    """
    workers = {
        address: (ws.nthreads, dict(ws.resources)) for address, ws in scheduler.workers.items()
    }
    return workers, scheduler.get_metadata(keys=list(path), default={})


def schedule_unrunnable(scheduler, worker: str) -> int:
    """After ``worker``'s supply grew, start the waiting tasks that now fit on it.

    Why: ``set_resources`` does not re-examine tasks that were unrunnable for
    lack of resources. Public replacement: none.
    """
    ws = scheduler.workers.get(worker)
    if ws is None or not have("Scheduler.bulk_schedule_unrunnable_after_adding_worker"):
        return 0
    recs = scheduler.bulk_schedule_unrunnable_after_adding_worker(ws)
    if recs:
        scheduler.transitions(recs, stimulus_id=f"hrl-tasks-supply-{time.time()}")
    return len(recs)


def upload_directory(plugin_class, path: str):
    """``UploadDirectory(path, update_path=True)`` restarting the workers: the keyword is
    ``restart_workers`` from distributed 2024.12 on, ``restart`` before."""
    try:
        return plugin_class(path, update_path=True, restart_workers=True)
    except TypeError:
        return plugin_class(path, update_path=True, restart=True)


async def ask_peer(comm, op: str, **message):
    """Send one request over ``comm`` (from the worker's connection pool) and return
    the reply: how a worker asks another worker's handler ``op`` for a value.

    Why: ``distributed.core.send_recv`` is internal. Public replacement: none for
    worker-to-worker requests on a connection taken from ``worker.rpc``.
    """
    if not have("core.send_recv"):
        await comm.write({"op": op, "reply": True, **message})
        return await comm.read()
    from distributed.core import send_recv

    return await send_recv(comm, op=op, **message)


async def worker_heartbeats(client: Client) -> dict:
    """``{address: when the scheduler last heard from it}``, on the scheduler's clock.

    Why: the scheduler's ``identity`` handler is reached through
    ``client.scheduler``; ``Client.scheduler_info`` is its public form, but it
    blocks (``sync``) and cannot be awaited on the event loop.
    """
    import inspect

    # distributed before 2025 sends every worker and refuses the argument (logging the
    # refusal on the scheduler at every call, so it is not tried there)
    counted = "n_workers" in inspect.signature(Client.scheduler_info).parameters
    identity = client.scheduler.identity
    workers = (await (identity(n_workers=-1) if counted else identity()))["workers"]
    return {address: info["last_seen"] for address, info in workers.items()}


def silent_among(seen: dict, lag_s: float) -> set:
    """Of the workers last heard from at ``seen``, those not heard from for ``lag_s``
    (at least five heartbeats) longer than the last one heard from.

    A stopped (``SIGSTOP``) worker still accepts connections, and a fetch of its
    results waits out Dask's 30 s connect time-out; its heartbeats stop at once.
    Lags between workers, all read from the scheduler's clock, need no clock of
    ours and no connection of ours to the workers.

    Why: ``heartbeat_interval`` is the scheduler's rule for how often workers report.
    """
    if len(seen) < 2:
        return set()  # no other worker to turn to
    bound = max(lag_s, 5 * heartbeat_of(len(seen)))
    latest = max(seen.values())
    return {address for address, last in seen.items() if latest - last > bound}


def heartbeat_of(workers: int) -> float:
    """Seconds between a worker's heartbeats in a cluster of ``workers``, as the
    scheduler asks for them."""
    if have("scheduler.heartbeat_interval"):
        from distributed.scheduler import heartbeat_interval

        return heartbeat_interval(workers)
    if workers <= 10:  # distributed.scheduler.heartbeat_interval's rule
        return 0.5
    if workers < 50:
        return 1
    if workers < 200:
        return 2
    return workers / 200 + 1  # no more than 200 heartbeats a second


async def holders(client: Client, key) -> tuple:
    """The workers holding ``key``'s value.

    Why: the scheduler's ``who_has`` handler through ``client.scheduler``;
    ``Client.who_has`` is its public form, but it blocks (``sync``) and cannot be
    awaited on the event loop.
    """
    return tuple((await client.scheduler.who_has(keys=[key])).get(key, ()))


async def silent_holders(client: Client, keys: list, lag_s: float) -> dict:
    """Of the workers holding ``keys``, the silent ones (:func:`silent_among`):
    ``{key: address}`` for each key held by such workers only.

    Why: ``who_has`` through ``client.scheduler``, as ``identity`` in
    :func:`worker_heartbeats`.
    """
    who_has = await client.scheduler.who_has(keys=list(keys))
    silent = silent_among(await worker_heartbeats(client), lag_s)
    return {
        key: holders[0]
        for key, holders in who_has.items()
        if holders and all(address in silent for address in holders)
    }


async def open_stream(address: str, handler: str, connection_args: dict, timeout: float):
    """A connection to ``address`` handed to its ``handler`` for good (a stream of
    messages both ways, as the scheduler's ``add_client``), opened within ``timeout``;
    and whether the handler agreed to take the socket over (it answers first).

    Why: ``distributed.comm.connect`` is the transport layer below ``rpc``; a
    stream that the handler keeps needs its comm, which ``rpc`` does not hand out.
    Public replacement: none.
    """
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout, **connection_args)
    plain = plain_socket_possible(comm)
    await comm.write({"op": handler, "reply": False, "plain": plain})
    answer = await comm.read()
    return comm, bool(plain and isinstance(answer, dict) and answer.get("plain"))


def plain_socket_possible(comm) -> bool:
    """Whether ``comm`` runs on a plain TCP socket (not TLS, not in-process)."""
    if not have("comm.tcp.TCP.stream"):
        return False
    from distributed.comm.tcp import TCP, TLS

    plain = isinstance(comm, TCP) and not isinstance(comm, TLS)
    return plain and getattr(comm, "stream", None) is not None


def plain_socket(comm):
    """The socket of plain TCP ``comm``, taken over (``comm`` is aborted, the
    connection stays open on the socket returned), or None for another transport.

    Why: Dask's comm serializes through its protocol and reads through Tornado's
    stream; the direct route's messages are pickles that need neither (see
    :mod:`hrl_tasks.scheduler.wire`). ``TCP.stream`` is Tornado's ``IOStream``;
    ``abort`` closes it without shutting the connection down, so the duplicate
    keeps it. Public replacement: none.
    """
    if not plain_socket_possible(comm):
        return None
    sock = comm.stream.socket.dup()
    comm.abort()
    sock.setblocking(False)
    return sock


def sync_on_loop(loop, coroutine_fn, *args):
    """Run ``coroutine_fn(*args)`` on the event loop ``loop`` from another thread, blocking.

    Why: a task's thread needs a value that the worker fetches on its event loop.
    ``distributed.utils.sync`` is what ``Client.sync`` uses. Public replacement: none
    for a worker's loop (``asyncio.run_coroutine_threadsafe`` needs the asyncio loop,
    which Tornado's ``IOLoop`` wraps).
    """
    if not have("utils.sync"):
        return asyncio.run_coroutine_threadsafe(coroutine_fn(*args), loop.asyncio_loop).result()
    from distributed.utils import sync

    return sync(loop, coroutine_fn, *args)


# --- dask-gateway's client ------------------------------------------------------


def close_gateway_once(gateway) -> None:
    """Close a ``dask_gateway.Gateway`` client so that it stays closed.

    Why: ``Gateway.__del__`` closes the client again, and with this range of
    distributed a second close raises (its loop has stopped: "Accessing the loop
    property while the loop is not running"), printed as "Exception ignored in
    Gateway.__del__" whenever the object is collected, in the middle of a run. The
    finalizer skips a client without its loop runner, a private name of dask-gateway's;
    should it go, the client is closed as before and the message may come back.
    Public replacement: none (``Gateway.close`` is not idempotent).
    """
    gateway.close()
    gateway_closed(gateway)


def gateway_closed(gateway) -> None:
    """Tell a ``dask_gateway.Gateway`` client closed elsewhere (``GatewayCluster.close``
    closes its own) that it is; its finalizer then does not close it again."""
    if hasattr(gateway, "_loop_runner") and have("Gateway._loop_runner"):
        del gateway._loop_runner  # noqa: SLF001
    else:
        gone("Gateway._loop_runner")
