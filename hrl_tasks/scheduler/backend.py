"""The Dask backend: carries out the state machine's instructions on a ``distributed.Client``.

It turns Dask callbacks (an attempt ended, a worker reported, a worker left)
into events for :class:`~hrl_tasks.scheduler.state.EngineState`, and the
instructions that come back into calls: a launch goes to the route that
carries it (:mod:`~hrl_tasks.scheduler.routes`: Dask's, the task stream, direct
calls), the rest is done here (puts, supply changes, reading the workers,
fetching results through the routes that hold them). The state machine changes
only on the client's event loop, its one owner: user threads hand their
requests over with :meth:`DaskBackend.push`, after recording what the state
machine cannot hold (a task's function and arguments, its ref's outcome: see
:class:`~hrl_tasks.scheduler.records.BackendRecords`). Calls that block on the
scheduler (changing a worker's advertised resources, reading the workers) run on
admin threads, and come back as events.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import contextlib
import itertools
import logging
import threading
import time

from distributed import Client

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.call_route import CallRoute
from hrl_tasks.scheduler.dask_route import DaskRoute
from hrl_tasks.scheduler.errors import SchedulerLostError
from hrl_tasks.scheduler.records import BackendRecords
from hrl_tasks.scheduler.routes import CONNECTED, ask_worker, route_of
from hrl_tasks.scheduler.runtime import (
    change_supply,
    schedule_unrunnable,
    workers_and_holdings,
)
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.story import dask_record
from hrl_tasks.scheduler.stream_route import StreamRoute
from hrl_tasks.scheduler.task_service import STORY_HANDLER
from hrl_tasks.scheduler.taskref import Kept, Local
from hrl_tasks.scheduler.validate import InvalidState

logger = logging.getLogger(__name__)
SUPPLY_THREADS = 4  # supply changes to this many workers at once


class OrderedPerKey:
    """Runs jobs on a few threads, one at a time and in order per key: a job that
    waits (on a worker that does not answer) holds up the later jobs of its key only."""

    def __init__(self, threads: int, name: str):
        self.pool = cf.ThreadPoolExecutor(threads, thread_name_prefix=name)
        self.lock = threading.Lock()
        self.waiting: dict[str, collections.deque] = {}  # key -> jobs behind the running one

    def submit(self, key: str, fn, *args) -> None:
        with self.lock:
            queue = self.waiting.get(key)
            if queue is not None:
                queue.append((fn, args))
                return
            self.waiting[key] = collections.deque()
        self.pool.submit(self._run, key, fn, args)

    def _run(self, key: str, fn, args) -> None:
        while True:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a job's failure must not stop its key's queue
                logger.exception("%s failed", getattr(fn, "__name__", fn))
            with self.lock:
                queue = self.waiting[key]
                if not queue:
                    del self.waiting[key]
                    return
                fn, args = queue.popleft()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False)


class DaskBackend(BackendRecords):
    """Runs an :class:`EngineState` on a Dask client.

    Args:
        client: the client.
        state: the state machine.
        topic: where the workers report this engine's tasks.
    """

    def __init__(self, client: Client, state: EngineState, topic: str):
        super().__init__()
        self.client = client
        self.header_keys = dask_compat.pin_header_keys()  # messages leave no dead slots
        self.state = state
        self.topic = topic
        self.loop = client.loop
        self.lock = threading.Lock()  # held while the state changes; readers take it too
        self.closed = False
        self.held_back: dict[str, list] = {}  # obj id -> creations waiting for a supply change
        self.lingering: list = []  # finished results' futures, released in batches
        self.letting_go = False
        # Supply changes call the worker: one that just died holds up its own changes
        # (Dask retries a connection for 30 s), not those of the others, nor the reads.
        self.admin = OrderedPerKey(SUPPLY_THREADS, f"{topic}-admin")
        self.reader = cf.ThreadPoolExecutor(1, thread_name_prefix=f"{topic}-reader")
        self.refreshing = False
        self.refresh_again = False
        self.loop_thread = client.sync(self._thread_id)
        self.lost: SchedulerLostError | None = None
        self.invalid: InvalidState | None = None  # what a validating state machine found
        self.put_values: dict = {}  # put task id -> its value, while its ref is held
        self.put_futures: dict = {}  # put task id -> the Dask future holding it now
        self.dask = DaskRoute(self, self)
        self.streams = StreamRoute(self, self)
        self.calls = CallRoute(self, self, self.streams)
        self.routes = {route.name: route for route in (self.dask, self.streams, self.calls)}
        self.launched: collections.Counter = collections.Counter()  # (route, kind) -> sent
        self.held = threading.local()  # per thread: the events `holding` keeps back
        self.start(self._watch_scheduler)

    @staticmethod
    async def _thread_id() -> int:
        return threading.get_ident()

    # --- events in --------------------------------------------------------------

    def push(self, *events) -> None:
        """Hand events to the state machine from any thread (it runs on the event loop).

        Each push is handled on its own, unless this thread holds them (`holding`).
        Handling every burst together (one ``client.map`` for a loop of ``submit``
        calls) made the submit loop 1.17x faster, but Dask then sometimes queued the
        burst behind cancelled tasks that still ran, so it is asked for, not assumed.
        """
        held = getattr(self.held, "events", None)
        if held is not None:
            held.extend(events)
            return
        self.on_loop(self.feed, *events)

    @contextlib.contextmanager
    def holding(self):
        """The events this thread pushes inside are handled together, in one go, at
        the end (`Engine.together`); a wait inside hands them over first."""
        outer = getattr(self.held, "events", None)
        self.held.events = [] if outer is None else outer
        try:
            yield
        finally:
            if outer is None:
                self.hand_over_held()

    def hand_over_held(self) -> None:
        """Push what this thread holds now (before it waits for any of it)."""
        events = getattr(self.held, "events", None)
        self.held.events = None
        if events:
            self.on_loop(self.feed, *events)

    def on_loop(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the event loop: now if this is its thread, else soon."""
        if threading.get_ident() == self.loop_thread:
            fn(*args)
        else:
            self.loop.add_callback(fn, *args)

    def start(self, coroutine_fn, *args) -> None:
        """Start ``coroutine_fn(*args)`` as a task on the event loop."""
        self.on_loop(lambda: asyncio.ensure_future(coroutine_fn(*args)))

    def later(self, *events) -> None:
        """Hand ``events`` to the state machine after what is being carried out now
        (on the event loop)."""
        self.loop.add_callback(self.feed, *events)

    def push_and_wait(self, *events) -> None:
        """Hand events to the state machine and return once they are handled."""
        self.hand_over_held()  # what this thread held comes first
        if threading.get_ident() == self.loop_thread:
            self.feed(*events)
            return

        async def handled():
            self.feed(*events)

        self.client.sync(handled)

    def feed(self, *events) -> None:
        """Advance the state and carry out its instructions (on the event loop)."""
        if self.closed:
            return
        events = self.with_released(events, ev.Released)
        if self.put_values and isinstance(events[-1], ev.Released):
            for task_id in events[-1].task_ids:
                if self.put_values.pop(task_id, None) is not None:
                    self.streams.forget_put(task_id)
                self.put_futures.pop(task_id, None)
        try:
            with self.lock:
                instructions = self.state.handle(*events, now=time.monotonic())
            self.execute(instructions)
        except InvalidState as exc:  # a bug in the engine: every wait raises it from now on
            self.invalid = self.invalid or exc
            logger.exception("hrl_tasks: invalid state after %s", events)
        except Exception:  # never stop the event loop; the log says what broke
            logger.exception("hrl_tasks: error while handling %s", events)

    def raise_if_invalid(self) -> None:
        """Raise the broken invariant a validating engine found, if it found one."""
        if self.invalid is not None:
            raise self.invalid

    def on_reports(self, event) -> None:
        """Start and end reports from the workers (a Dask topic handler)."""
        _, reports = event
        found = []
        for kind, key, name, worker, elapsed, age in reports:
            if kind == "start":
                found.append(ev.Started(key, worker, age))
            else:
                found.append(ev.Ended(key, name, worker, elapsed, age))
        self.feed(*found)

    def on_cluster_event(self, event) -> None:
        msg = event[1]
        if not isinstance(msg, dict):
            return
        if msg.get("action") == "remove-worker":
            self.feed(ev.WorkerRemoved(msg.get("worker", ""), bool(msg.get("expected"))))
        elif msg.get("action") == "add-worker":
            self.feed(ev.WorkerAdded(msg.get("worker", "")))
        elif msg.get("action") in ("silent", "reporting"):
            waiting = tuple(str(key) for key in msg.get("waiting") or ())
            silent = msg["action"] == "silent"
            self.feed(ev.WorkerSilent(msg.get("worker", ""), silent, waiting))
            if silent:  # what it relays for its host-mates would wait with it
                self.calls.relay_silent(msg.get("worker", ""))

    async def _watch_scheduler(self) -> None:
        """Fail everything at once when the client loses its scheduler.

        Dask cancels all of a client's futures as soon as its connection to the
        scheduler breaks, before it tries to reconnect (``Client._reconnect``);
        what was running is gone even if it reconnects, so there is nothing to
        wait for."""
        while not self.closed:
            await asyncio.sleep(self.state.timings.scheduler_check_s)
            if self.closed or self.client.status in CONNECTED:
                continue
            self.feed(ev.SchedulerLost(str(self.lost_scheduler())))
            return

    def lost_scheduler(self) -> SchedulerLostError:
        """The error for a client that lost its scheduler (the same one each time)."""
        if self.lost is None:
            address = getattr(self.client.scheduler, "address", None) or "its address"
            self.lost = SchedulerLostError(
                f"lost the Dask scheduler at {address} (client {self.client.status}): its "
                "process died or the network failed, and Dask cancelled the work in the "
                "cluster; restart the scheduler and resume from the last checkpoint"
            )
        return self.lost

    # --- instructions out ---------------------------------------------------------

    def execute(self, instructions: list) -> None:
        launches = []
        for ins in instructions:
            if isinstance(ins, ev.Launch):
                launches.append(ins)
                continue
            if launches:
                self.launch(launches)
                launches = []
            self.carry_out(ins)
        if launches:
            self.launch(launches)

    def carry_out(self, ins) -> None:
        if isinstance(ins, ev.Resolve):
            found = self.result_of(ins.key)
            self.settle(ins.task_id, value=Local(None) if found is None else found)
            if found is not None and not isinstance(found, Local):
                self.linger(found)
        elif isinstance(ins, ev.Fail):
            self.settle(ins.task_id, error=ins.error)
        elif isinstance(ins, ev.Forget):
            for key in ins.keys:
                self.forget(key)
        elif isinstance(ins, ev.Cancel):
            for obj_id, waiting in self.held_back.items():  # not sent yet: never will be
                self.held_back[obj_id] = [w for w in waiting if w.key not in ins.keys]
            for route in self.routes.values():
                route.cancel(ins.keys)
            for key in ins.keys:
                self.forget(key)
        elif isinstance(ins, ev.Skip):
            self.calls.skip(ins.obj_id, ins.address, ins.seqs)
        elif isinstance(ins, ev.Supply):
            self.held_back.setdefault(ins.obj_id, [])
            self.admin.submit(ins.address, self._change_supply, ins)
        elif isinstance(ins, ev.Refresh):
            self.refresh()
        elif isinstance(ins, ev.DropObject):
            self.drop_object(ins.obj_id)
        elif isinstance(ins, ev.Resend):
            if ins.task_id in self.put_values:
                value = self.put_values[ins.task_id]
                self.put_futures[ins.task_id] = self.dask.resend(ins.key, value)
        elif isinstance(ins, ev.Later):
            self.on_loop(self.loop.call_later, ins.delay, self.feed, ins.event)

    def linger(self, future) -> None:
        """Hold a result's future a little after its ref is dropped.

        A dropped future makes the client tell the scheduler at once, and the
        scheduler the worker, in the middle of the next round trip: one call
        after another, that cost about 4 ms of each call's latency here.
        Held for ``Timings.linger_s``, the releases go out together.
        """
        self.lingering.append(future)
        if not self.letting_go:
            self.letting_go = True
            self.on_loop(self.loop.call_later, self.state.timings.linger_s, self._let_go)

    def _let_go(self) -> None:
        self.letting_go = False
        self.lingering = []

    def launch(self, launches: list) -> None:
        """Send attempts, each by its route (`routes.route_of`), in their order: the
        launches of one route in a row go together (Dask's as one batch). An attempt
        that cannot be sent (its arguments do not serialize, its input is gone) ends
        at once as a failed attempt, which the state machine handles as any other
        failure."""
        ready = []
        for launch in launches:
            if launch.kind == "create":
                self.creating(launch.obj_id, launch.task_id)
                if launch.obj_id in self.held_back:
                    self.held_back[launch.obj_id].append(launch)  # after the supply change
                    continue
            ready.append(launch)
        failed = []
        for route, run in itertools.groupby(ready, route_of):
            run = list(run)
            self.launched.update((route, launch.kind) for launch in run)
            failed += self.routes[route].launch(run)
        if failed:  # after the instructions being carried out now
            self.later(*failed)

    def worker_stories(
        self, places: dict[str, set[str]], dask_keys: set[str] = frozenset()
    ) -> list[tuple]:
        """The workers' half of attempts' stories, ``(age, address, key, what)`` each,
        asked at once: of every worker in ``places`` (address -> keys of attempts sent
        on its stream), and for ``dask_keys`` (attempts on Dask's route) of Dask's
        scheduler and of every worker the engine knows, as ``client.story`` asks them.
        One that does not answer within ``Timings.story_ask_s`` says so instead (a
        frozen worker takes the connection and never answers; ``client.story`` would
        wait for it)."""
        if not (places or dask_keys) or self.closed:
            return []
        return self.client.sync(self._worker_stories, places, dask_keys)

    async def _worker_stories(self, places: dict, dask_keys: set[str]) -> list[tuple]:
        ask_s = self.state.timings.story_ask_s

        async def one(address: str, keys: set[str]) -> list[tuple]:
            asked_at = time.monotonic()
            try:
                entries = await ask_worker(
                    self.client,
                    address,
                    ask_s,
                    lambda ask: asyncio.wait_for(ask, ask_s),
                    STORY_HANDLER,
                    keys=sorted(keys),
                )
            except Exception as exc:  # gone, frozen, or no task service there
                return [(0.0, address, "", f"did not tell its half ({type(exc).__name__})")]
            # The worker's ages are of about halfway through the ask: made ages of its end.
            late = (time.monotonic() - asked_at) / 2
            return [(age + late, address, key, what) for age, key, what in entries]

        asks = [one(a, k) for a, k in sorted(places.items())]
        if dask_keys:
            keys = sorted(dask_keys)
            asks.append(self._dask_story("scheduler", keys))
            asks += [self._dask_story(a, keys) for a in sorted(self.state.nthreads)]
        found = await asyncio.gather(*asks)
        return [entry for entries in found for entry in entries]

    async def _dask_story(self, address: str, keys: list[str]) -> list[tuple]:
        """Dask's story of ``keys`` as the scheduler (``address="scheduler"``) or a
        worker keeps it: its records of those keys, aged by the wall clock (Dask's
        logs stamp ``time()``)."""
        ask_s = self.state.timings.story_ask_s
        try:
            if address == "scheduler":
                asked = self.client.scheduler.get_story(keys_or_stimuli=keys)
                records = await asyncio.wait_for(asked, ask_s)
            else:
                records = await ask_worker(
                    self.client,
                    address,
                    ask_s,
                    lambda ask: asyncio.wait_for(ask, ask_s),
                    "get_story",
                    keys_or_stimuli=keys,
                )
        except Exception as exc:  # gone, frozen
            return [(0.0, address, "", f"did not tell its part ({type(exc).__name__})")]
        now, wanted, found = time.time(), set(keys), []
        for record in records:
            entry = dask_record(record)
            if entry is not None and entry[0] in wanted:
                key, what, stamp = entry
                found.append((max(0.0, now - stamp), address, key, what))
        return found

    async def _heartbeats(self) -> dict | None:
        """When the scheduler last heard from each worker (see
        `dask_compat.worker_heartbeats`), or None if it could not say."""
        try:
            return await dask_compat.worker_heartbeats(self.client)
        except (OSError, KeyError, TypeError):  # the scheduler is busy or different
            return None

    async def silent_workers(self, seen: dict | None = None) -> set:
        """The workers that stopped reporting (see `dask_compat.silent_among`), as the
        workers' heartbeats say now; what is new goes to the state (``WorkerSilent``,
        as the scheduler plugin's events: the engine knows one set of silent workers)."""
        seen = await self._heartbeats() if seen is None else seen
        if seen is None:
            return set()
        silent = dask_compat.silent_among(seen, self.state.timings.holder_silent_s)
        known = self.state.silent
        news = [ev.WorkerSilent(a) for a in sorted(silent - known)]
        news += [ev.WorkerSilent(a, silent=False) for a in sorted(known - silent) if a in seen]
        if news:
            self.feed(*news)
        return silent

    # --- the cluster (admin threads) -------------------------------------------------

    def _change_supply(self, ins: ev.Supply) -> None:
        client = self.client
        record = ["hrl-tasks", "held", ins.address, ins.obj_id]
        # Readers add what is held to what a worker advertises (see `see_workers`): the
        # advertised supply falls before a holding is recorded, and a release is recorded
        # before it rises, so a read between the two steps finds less room, never more.
        try:
            if self.closed or client.status not in CONNECTED:
                return  # the engine closed: the supply goes with the cluster or its client
            if next(iter(ins.delta.values())) > 0:
                client.set_metadata(record, ins.held)
                client.run(change_supply, ins.delta, workers=[ins.address])
                client.run_on_scheduler(schedule_unrunnable, worker=ins.address)
            else:
                client.run(change_supply, ins.delta, workers=[ins.address])
                client.set_metadata(record, ins.held)
        except (OSError, KeyError, ValueError):
            pass  # the worker is gone; so is what it advertised
        finally:
            self.loop.add_callback(self._supply_changed, ins.obj_id)

    def _supply_changed(self, obj_id: str) -> None:
        waiting = self.held_back.pop(obj_id, [])
        if waiting:
            self.launch(waiting)

    def refresh(self) -> None:
        """Read the workers on the admin thread; they come back as :class:`WorkersSeen`."""
        if self.refreshing:
            self.refresh_again = True
            return
        self.refreshing = True
        try:
            self.reader.submit(self._refresh)
        except RuntimeError:  # the interpreter is exiting with the engine still open
            self.refreshing = False

    def _refresh(self) -> None:
        try:
            seen = self.see_workers()
        except Exception:  # the scheduler is busy or going away: the next sweep tries again
            seen = None
        if self.client.status not in CONNECTED:
            # A client that lost its scheduler reads no workers: that says nothing of the
            # workers, and the scheduler check reports the loss itself.
            seen = None
        self.loop.add_callback(self._refreshed, seen)

    def _refreshed(self, seen) -> None:
        self.refreshing = False
        if seen is not None:
            self.feed(seen)
        if self.refresh_again:
            self.refresh_again = False
            self.refresh()

    def read_workers(self) -> dict:
        """address -> (threads, resources declared), resources held by objects included
        (the engine lowers what a worker advertises while an object holds them)."""
        return self.see_workers().workers

    def see_workers(self) -> ev.WorkersSeen:
        """The workers (see `read_workers`) and what every engine's objects hold on them."""
        # One read of both: read apart, a holding made between them counts twice.
        workers, held = self.client.run_on_scheduler(workers_and_holdings, ["hrl-tasks", "held"])
        found = {}
        holders = {}
        for address, (threads, advertised) in workers.items():
            declared = dict(advertised or {})
            holders[address] = {
                h: dict(r) for h, r in ((held or {}).get(address) or {}).items() if r
            }
            for request in holders[address].values():
                for name, amount in request.items():
                    declared[name] = declared.get(name, 0.0) + amount
            found[address] = (int(threads or 1), declared)
        return ev.WorkersSeen(found, holders)

    # --- results (user threads) -------------------------------------------------------

    def gather(self, refs: list, timeout: float | None) -> list:
        """The results of ``refs`` in order; raises the first error among them.

        Two routes, each the faster one measured for its kind: stateful-worker
        calls, direct calls and the direct route's tasks are awaited here, on
        their outcomes, and what is not in this process is then fetched in one
        batch (a pinned task took 8.5-9 ms as one ``client.sync`` round trip,
        7.4-7.8 ms so; a direct-route task's small result needs no hop to the
        event loop at all); the Dask route's tasks are awaited and fetched in
        one round trip on the event loop (6.2 ms against 7.0-7.6 ms).
        """
        if not all(ref.pinned or ref.route == "direct" for ref in refs):
            return self.client.sync(self._gather, refs, callback_timeout=timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for ref in refs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                values.append(ref.outcome.result(left))
            except cf.TimeoutError:
                raise TimeoutError(f"task {ref.name!r} not done within {timeout} s") from None
        if all(isinstance(v, Local) for v in values):  # no hop to the event loop
            return [v.value for v in values]
        if not all(ref.pinned for ref in refs) or any(isinstance(v, Kept) for v in values):
            # kept on workers, or in Dask
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self.client.sync(self._gather, refs, callback_timeout=left)
        return self.client.sync(self._fetch, values, refs)

    async def _gather(self, refs: list) -> list:
        values = []
        for ref in refs:  # in order: the first error among them is raised
            if not ref.outcome.done():
                mirror = asyncio.wrap_future(ref.outcome)
                await asyncio.wait([mirror])
                if not mirror.cancelled():
                    mirror.exception()  # read here, raised below: asyncio must not warn
            values.append(ref.outcome.result())  # raises the task's own error, as it was
        return await self._fetch(values, refs)

    async def _fetch(self, held: list, refs: list) -> list:
        """The values of ``refs`` from what holds them: here already (``Local``), or
        fetched by the route that holds them, each route's in one batch (Dask's
        futures, results kept on the workers of the task streams)."""
        found = [v.value if isinstance(v, Local) else None for v in held]
        by_route: dict = {}
        for i, value in enumerate(held):
            if not isinstance(value, Local):
                route = self.streams if isinstance(value, Kept) else self.dask
                by_route.setdefault(route, []).append(i)
        for route, places in by_route.items():
            fetched = await route.fetch([held[i] for i in places], [refs[i] for i in places])
            for i, value in zip(places, fetched, strict=True):
                found[i] = value
        return found

    def place(self, value, task_id: str, broadcast: bool = False):
        """Put ``value`` in the cluster once (``engine.put``), on every worker if
        ``broadcast``; its Dask future.

        The value goes to one worker; with ``broadcast`` it is then copied to the
        others, and the put returns once the copies are there or, should that take
        ``Timings.place_check_s`` (or should a worker be known to have stopped reporting),
        once a worker that still reports holds one (the rest go on in the
        background): a frozen worker, which accepts a connection and never answers,
        holds up neither the put nor the tasks that read it. Dask's copies wait
        for each other (``Scheduler.replicate`` holds one lock until every recipient
        answers), so a copy to a frozen worker would hold up every later put. The
        value stays here too while its ref is held: if the worker holding it
        dies, it is sent again (see :class:`~hrl_tasks.scheduler.events.Resend`)."""
        tries = 0
        while True:
            if self.lost is not None:
                raise self.lost
            try:
                future = self.client.sync(self._scatter, value, broadcast)
                break
            except OSError:  # sent to a worker that just died: the scheduler drops it soon
                tries += 1
                wait_s = self.state.timings.place_retry_after(tries)
                if wait_s is None:
                    raise
                time.sleep(wait_s)
        self.put_values[task_id], self.put_futures[task_id] = value, future
        return future

    async def _scatter(self, value, broadcast: bool = False):
        """``value``'s future once a worker that reports holds it (see `place`)."""
        while True:
            future = await self._scatter_once(value)
            if not broadcast or await self._copied(future):
                return future
            # Its only holder stopped reporting before a copy left it: again, elsewhere.

    async def _scatter_once(self, value):
        """``value``'s future once a worker holds it. A scatter still going after
        ``Timings.place_check_s`` looks for workers that stopped reporting and, if there are
        any, goes again to the others (a slow transfer is waited for); later puts
        leave those workers out until they report again."""
        silent = self.state.silent
        target = await self._reporting_workers() if silent else None
        scatter = self._scatter_to(value, target)
        while True:
            done, _ = await asyncio.wait([scatter], timeout=self.state.timings.place_check_s)
            if done:
                return scatter.result()[0]
            reporting = await self._reporting_workers()
            if reporting is not None and (target is None or silent & set(target)):
                scatter.cancel()
                target = reporting
                scatter = self._scatter_to(value, target)

    async def _copied(self, future) -> bool:
        """Copy ``future``'s value to every worker; False if its only holders stopped
        reporting before it was copied (it must go elsewhere)."""
        silent, timings = self.state.silent, self.state.timings
        reporting = await self._reporting_workers() if silent else None
        copying = asyncio.ensure_future(  # to the workers that report, if some do not
            self.client.replicate([future], workers=reporting, asynchronous=True)
        )
        # Dask makes copies under one lock, held by a copy to a frozen worker until it
        # answers: with a silent worker known, a holder that reports is looked for soon.
        wait_s = timings.place_poll_s if reporting is not None else timings.place_check_s
        while True:
            done, _ = await asyncio.wait([copying], timeout=wait_s)
            wait_s = timings.place_poll_s
            if done:  # a copy that failed (a worker left): tasks fetch from a holder
                if copying.exception() is not None:
                    logger.debug("a broadcast's copies did not all arrive: %r", copying.exception())
                return True
            reporting = await self._reporting_workers()
            try:
                holders = await dask_compat.holders(self.client, future.key)
            except (OSError, KeyError, TypeError):
                continue
            if not silent:
                continue  # a slow copy (or a freeze not yet seen): wait on
            if any(address not in silent for address in holders):
                self.start(self._finish_copies, copying)
                return True  # a worker that reports holds it: the rest copy in the background
            if reporting is not None:
                copying.cancel()
                return False

    @staticmethod
    async def _finish_copies(copying: asyncio.Future) -> None:
        try:
            await copying
        except Exception as exc:  # a worker left mid-copy: tasks fetch from a holder
            logger.debug("a broadcast's copies did not all arrive: %r", exc)

    def _scatter_to(self, value, workers: list | None) -> asyncio.Future:
        return asyncio.ensure_future(  # a list: not a dict's items
            self.client.scatter([value], hash=False, workers=workers, asynchronous=True)
        )

    async def _reporting_workers(self) -> list | None:
        """The workers that still report if some do not, else None: any worker will do.
        What it finds goes to the state (``WorkerSilent``), whose ``silent`` set is
        the one the engine knows, also from the scheduler's events."""
        seen = await self._heartbeats()
        if seen is None:
            return None
        silent = await self.silent_workers(seen)
        reporting = [address for address in seen if address not in silent]
        return reporting if silent and reporting else None

    def close(self) -> None:
        self.closed = True
        self.admin.shutdown()
        self.reader.shutdown(wait=False)
        self.streams.close()
