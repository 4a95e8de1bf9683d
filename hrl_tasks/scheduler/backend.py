"""The Dask backend: carries out the state machine's instructions on a ``distributed.Client``.

It does two things and nothing else: it turns Dask callbacks (an attempt
ended, a worker reported, a worker left) into events for
:class:`~hrl_tasks.scheduler.state.EngineState`, and the instructions that come
back into client calls. Everything runs on the client's event loop, the state
machine's one owner: user threads hand their requests over with
:meth:`DaskBackend.push`. Calls that block on the scheduler (changing a
worker's advertised resources, reading the workers) run on one admin thread,
and come back as events.

Attempts are Dask tasks with fresh keys run through
:func:`~hrl_tasks.scheduler.runtime.run_task`; a direct call is one message to
the object's worker (:mod:`~hrl_tasks.scheduler.worker_objects`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import threading
import time
from collections import deque

from distributed import Client, fire_and_forget
from distributed.protocol import to_serialize
from distributed.scheduler import KilledWorker

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import ObjectStartError, WorkerLostError
from hrl_tasks.scheduler.runtime import change_supply, run_task, schedule_unrunnable
from hrl_tasks.scheduler.shared import Shared, direct_arguments, inline
from hrl_tasks.scheduler.state import EngineState
from hrl_tasks.scheduler.taskref import Local, TaskRef
from hrl_tasks.scheduler.worker_objects import (
    DIRECT_HANDLER,
    call_object,
    create_object,
    destroy_object,
    skip_calls,
)

logger = logging.getLogger(__name__)
# Dask gives submissions less than ``fifo_timeout`` apart one generation, and a worker
# runs the newest of equal priority first (depth-first, for graphs). The engine's
# tasks are a queue: with no window, what was submitted first runs first, and a
# stateful worker's calls arrive in their order instead of waiting for their turn.
FIFO = "0 ms"


def resolve_inputs(obj, inputs: dict, futures: dict):
    """``obj`` with each TaskRef replaced by the Dask future of the key in ``inputs``
    (a dependency) and each `Shared` by its value."""

    def walk(item):
        if isinstance(item, Shared):
            return item.value
        if isinstance(item, TaskRef):
            found = futures.get(inputs.get(item.task_id))
            if found is None and item.outcome.done() and item.outcome.exception() is None:
                found = item.outcome.result()
            if found is None:
                found = item.future
            return found.value if isinstance(found, Local) else found
        if isinstance(item, (list, tuple, set, frozenset)):
            return type(item)(walk(x) for x in item)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(obj)


class DaskBackend:
    """Runs an :class:`EngineState` on a Dask client.

    Args:
        client: the client.
        state: the state machine.
        topic: where the workers report this engine's tasks.
    """

    def __init__(self, client: Client, state: EngineState, topic: str):
        self.client = client
        self.state = state
        self.topic = topic
        self.loop = client.loop
        self.lock = threading.Lock()  # held while the state changes; readers take it too
        self.closed = False
        self.outcomes: dict[str, cf.Future] = {}  # task id -> its ref's outcome, until settled
        self.payloads: dict[str, tuple] = {}  # task id -> (fn or method, args, kwargs, topic)
        self.objects: dict[str, tuple] = {}  # obj id -> (factory, args, kwargs, topic)
        self.creations: dict[str, cf.Future] = {}  # obj id -> its current creation's outcome
        self.futures: dict = {}  # key -> Dask future, or Local result, until forgotten
        self.held_back: dict[str, list] = {}  # obj id -> creations waiting for a supply change
        self.released_ids: deque = deque()
        self.admin = cf.ThreadPoolExecutor(1, thread_name_prefix=f"{topic}-admin")
        self.refreshing = False
        self.refresh_again = False
        self.loop_thread = client.sync(self._thread_id)

    @staticmethod
    async def _thread_id() -> int:
        return threading.get_ident()

    # --- events in --------------------------------------------------------------

    def push(self, *events) -> None:
        """Hand events to the state machine from any thread."""
        if threading.get_ident() == self.loop_thread:
            self.feed(*events)
        else:
            self.loop.add_callback(self.feed, *events)

    def push_and_wait(self, *events) -> None:
        """Hand events to the state machine and return once they are handled."""
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
        if self.released_ids:
            taken = [self.released_ids.popleft() for _ in range(len(self.released_ids))]
            events = (*events, ev.Released(tuple(taken)))
        try:
            with self.lock:
                instructions = self.state.handle(*events, now=time.monotonic())
            self.execute(instructions)
        except Exception:  # never stop the event loop; the log says what broke
            logger.exception("hrl_tasks: error while handling %s", events)

    def released(self, task_id: str) -> None:
        self.released_ids.append(task_id)

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
            found = self.futures.get(ins.key)
            self._settle(ins.task_id, value=Local(None) if found is None else found)
        elif isinstance(ins, ev.Fail):
            self._settle(ins.task_id, error=ins.error)
        elif isinstance(ins, ev.Forget):
            for key in ins.keys:
                self.futures.pop(key, None)
        elif isinstance(ins, ev.Cancel):
            found = [self.futures.pop(key, None) for key in ins.keys]
            in_cluster = [f for f in found if f is not None and not isinstance(f, Local)]
            if in_cluster:
                asyncio.ensure_future(dask_compat.cancel(self.client, in_cluster))
        elif isinstance(ins, ev.Skip):
            spec = self._spec(self.state.new_key("skip"), "skip", 0, {}, self.topic, True)
            future = self.client.submit(
                run_task, skip_calls, spec, (ins.obj_id, list(ins.seqs)), {}, key=spec["key"],
                pure=False, workers=[ins.address], allow_other_workers=False,
            )  # fmt: skip
            fire_and_forget(future)
        elif isinstance(ins, ev.Supply):
            self.held_back.setdefault(ins.obj_id, [])
            self.admin.submit(self._change_supply, ins)
        elif isinstance(ins, ev.Refresh):
            self.refresh()
        elif isinstance(ins, ev.Later):
            self.loop.call_later(ins.delay, self.feed, ins.event)

    def _settle(self, task_id: str, value=None, error: BaseException | None = None) -> None:
        outcome = self.outcomes.pop(task_id, None)
        self.payloads.pop(task_id, None)
        if outcome is None or outcome.done():
            return
        if error is None:
            outcome.set_result(value)
        else:
            outcome.set_exception(error)

    @staticmethod
    def _spec(key, name, attempt, resources, topic, internal) -> dict:
        return {"key": key, "name": name, "attempt": attempt, "resources": resources or {},
                "topic": topic, "internal": internal}  # fmt: skip

    def launch(self, launches: list) -> None:
        """Send attempts: direct calls as messages, the rest as Dask tasks, batched."""
        batches: dict[tuple, list] = {}
        for launch in launches:
            if launch.kind == "create" and launch.obj_id in self.held_back:
                self.held_back[launch.obj_id].append(launch)  # after the supply change
                continue
            if launch.direct:
                self._send_direct(launch)
                continue
            fn, args, kwargs, topic = self._call_of(launch)
            spec = self._spec(launch.key, launch.name, launch.attempt, launch.request, topic,
                              launch.internal)  # fmt: skip
            options = (launch.workers, tuple(sorted(launch.request.items())), launch.priority)
            batches.setdefault(options, []).append((launch, fn, spec, args, kwargs))
        for (workers, request, priority), batch in batches.items():
            pin = (
                {} if workers is None else {"workers": list(workers), "allow_other_workers": False}
            )
            keys = [spec["key"] for _, _, spec, _, _ in batch]
            common = {"pure": False, "resources": dict(request) or None, "priority": priority,
                      "fifo_timeout": FIFO, **pin}  # fmt: skip
            if len(batch) == 1:
                _, fn, spec, args, kwargs = batch[0]
                futures = [self.client.submit(run_task, fn, spec, args, kwargs, key=keys[0],
                                              **common)]  # fmt: skip
            else:
                columns = list(zip(*[(fn, spec, args, kwargs) for _, fn, spec, args, kwargs in batch],
                                   strict=True))  # fmt: skip
                futures = self.client.map(run_task, *columns, key=keys, **common)
            for (launch, *_), future in zip(batch, futures, strict=True):
                self.futures[launch.key] = future
                asyncio.ensure_future(self._watch(launch.key, future, launch.fetch))

    def _call_of(self, launch: ev.Launch) -> tuple:
        """``(fn, args, kwargs, topic)`` of a launch, inputs resolved to Dask futures."""
        if launch.kind == "task":
            fn, args, kwargs, topic = self.payloads[launch.task_id]
            args, kwargs = resolve_inputs((args, kwargs), launch.inputs, self.futures)
            return fn, args, kwargs, topic
        factory, fargs, fkwargs, topic = self.objects[launch.obj_id]
        if launch.kind == "create":
            self.creations[launch.obj_id] = self.outcomes.setdefault(launch.task_id, cf.Future())
            return create_object, (launch.obj_id, launch.seq, factory, fargs, fkwargs,
                                   launch.state), {}, topic  # fmt: skip
        if launch.kind == "destroy":
            return destroy_object, (launch.obj_id, launch.seq), {}, topic
        method, margs, mkwargs = self._method_of(launch)
        margs, mkwargs = resolve_inputs((margs, mkwargs), launch.inputs, self.futures)
        return call_object, (launch.obj_id, launch.seq, method, margs, mkwargs), {}, topic

    def _method_of(self, launch: ev.Launch) -> tuple:
        if launch.kind == "snapshot":
            return "get_state", (), {}
        payload = self.payloads.get(launch.args_of or launch.task_id)
        if payload is None:
            raise KeyError(f"the arguments of {launch.name} are gone")
        return payload[:3]

    async def _watch(self, key: str, future, fetch: bool) -> None:
        status, error = await dask_compat.outcome(future)
        value = None
        if status == "finished" and fetch:
            try:
                value = await self.client.gather(future, asynchronous=True)
            except Exception as exc:
                status, error = "error", exc
        lost = isinstance(error, (KilledWorker, WorkerLostError))
        self.feed(ev.AttemptDone(key, status, error, lost, value))

    # --- direct calls -------------------------------------------------------------

    def _send_direct(self, launch: ev.Launch) -> None:
        address = launch.workers[0]
        topic = self.objects[launch.obj_id][3]
        method, margs, mkwargs = self._method_of(launch)
        (args, kwargs), values = direct_arguments((margs, mkwargs), address)
        call = (launch.obj_id, launch.seq, method, args, kwargs)
        spec = self._spec(launch.key, launch.name, launch.attempt, {}, topic, launch.internal)
        self.futures[launch.key] = None
        asyncio.ensure_future(self._direct(launch, address, spec, call, values))

    async def _direct(self, launch: ev.Launch, address: str, spec: dict, call, values) -> None:
        try:
            await self._created(launch, address)
            handler = getattr(self.client.rpc(address), DIRECT_HANDLER)
            response = await handler(spec=spec, call=to_serialize(call))
            if response["status"] == "input-lost":  # its holder is gone: send the values
                response = await handler(spec=spec, call=to_serialize(inline(call, values)))
        except (OSError, WorkerLostError) as exc:
            lost = WorkerLostError(
                f"{launch.name}: lost the connection to worker {address} during a direct call "
                f"({exc!r})",
                address=address,
            )
            self.feed(ev.AttemptDone(launch.key, "error", lost, worker_lost=True))
            return
        except Exception as exc:  # the object did not start, or the message could not be made
            self.feed(ev.AttemptDone(launch.key, "error", exc))
            return
        if response["status"] != "OK":
            self.feed(ev.AttemptDone(launch.key, "error", response["exception"]))
            return
        if launch.key in self.futures:
            self.futures[launch.key] = Local(response["result"])
        value = response["result"] if launch.fetch else None
        self.feed(ev.AttemptDone(launch.key, "finished", value=value))

    async def _created(self, launch: ev.Launch, address: str) -> None:
        """Wait for the object's creation; raise as a pinned call would if it failed."""
        creation = self.creations.get(launch.obj_id)
        if creation is None:
            return
        try:
            await asyncio.wrap_future(creation)
        except WorkerLostError:
            raise
        except Exception as exc:
            raise ObjectStartError(
                f"{launch.name}: the stateful worker on {address} failed to start"
            ) from exc

    # --- the cluster (admin thread) -------------------------------------------------

    def _change_supply(self, ins: ev.Supply) -> None:
        client = self.client
        try:
            client.set_metadata(["hrl-tasks", "held", ins.address, ins.obj_id], ins.held)
            client.run(change_supply, ins.delta, workers=[ins.address])
            if next(iter(ins.delta.values())) > 0:
                client.run_on_scheduler(schedule_unrunnable, worker=ins.address)
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
        self.admin.submit(self._refresh)

    def _refresh(self) -> None:
        try:
            seen = ev.WorkersSeen(self.read_workers())
        except Exception:  # the scheduler is busy or going away: the next sweep tries again
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
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        held = self.client.get_metadata(["hrl-tasks", "held"], default={}) or {}
        found = {}
        for address, info in workers.items():
            declared = dict(info.get("resources") or {})
            for request in (held.get(address) or {}).values():
                for name, amount in request.items():
                    declared[name] = declared.get(name, 0.0) + amount
            found[address] = (int(info.get("nthreads", 1)), declared)
        return found

    # --- results (user threads) -------------------------------------------------------

    def gather(self, refs: list, timeout: float | None) -> list:
        """The results of ``refs`` in order; raises the first error among them."""
        if all(ref.direct for ref in refs):  # values in this process: no need for the loop
            deadline = None if timeout is None else time.monotonic() + timeout
            values = []
            for ref in refs:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    values.append(ref.outcome.result(left).value)
                except cf.TimeoutError:
                    raise TimeoutError(f"task {ref.name!r} not done within {timeout} s") from None
            return values
        return self.client.sync(self._gather, [r.outcome for r in refs], callback_timeout=timeout)

    async def _gather(self, outcomes: list) -> list:
        values = []
        for outcome in outcomes:  # in order: the first error among them is raised
            if not outcome.done():
                await asyncio.wait([asyncio.wrap_future(outcome)])
            values.append(outcome.result())  # raises the task's own error, as it was
        remote = [v for v in values if not isinstance(v, Local)]
        fetched = iter(await self.client.gather(remote, asynchronous=True) if remote else ())
        return [v.value if isinstance(v, Local) else next(fetched) for v in values]

    def place(self, value):
        """Put ``value`` in the cluster once (``engine.put``); its Dask future."""
        (future,) = self.client.scatter([value], hash=False)  # a list: not a dict's items
        return future

    def close(self) -> None:
        self.closed = True
        self.admin.shutdown(wait=False)
