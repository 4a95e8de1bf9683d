"""Dask's route: attempts as Dask tasks with fresh keys, through Dask's scheduler.

Each attempt runs through :func:`~hrl_tasks.scheduler.runtime.run_task` on the
worker Dask picks (or the one the engine pinned it to), and its start and end
come back as reports on the engine's topic. Launches with the same options go
out as one ``client.map``; an input's future is Dask's to wire.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
from typing import TYPE_CHECKING

from distributed.scheduler import KilledWorker

from hrl_tasks.scheduler import dask_compat
from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import ResultsLost, WorkerLostError
from hrl_tasks.scheduler.routes import CONNECTED, method_of, resolve_inputs, spec
from hrl_tasks.scheduler.runtime import run_task
from hrl_tasks.scheduler.serialization import Sealed
from hrl_tasks.scheduler.worker_objects import call_object, create_object, destroy_object

if TYPE_CHECKING:
    from hrl_tasks.scheduler.records import BackendRecords
    from hrl_tasks.scheduler.routes import Carrier

# Dask gives submissions less than ``fifo_timeout`` apart one generation, and a worker
# runs the newest of equal priority first (depth-first, for graphs). The engine's
# tasks are a queue: with no window, what was submitted first runs first, and a
# stateful worker's calls arrive in their order instead of waiting for their turn.
FIFO = "0 ms"


def resent_value(value):
    """The task that puts a value lost with its worker in the cluster again."""
    return value


class DaskRoute:
    """Attempts as Dask tasks (see the module)."""

    name = "dask"

    def __init__(self, carrier: Carrier, records: BackendRecords):
        self.carrier = carrier
        self.records = records

    def launch(self, launches: list[ev.Launch]) -> list[ev.AttemptDone]:
        """Submit ``launches``, one ``map`` per set of options (an input in the same
        batch goes out first)."""
        batches: dict[tuple, list] = {}
        batched: set[str] = set()  # the keys in ``batches``
        failed = []
        for launch in launches:
            if any(key in batched for key in launch.inputs.values()):
                failed += self._submit(batches)  # an input is in this very batch: first
                batches, batched = {}, set()
            try:
                fn, args, kwargs, topic = self._call_of(launch)
                if not launch.inputs:  # nothing for Dask to wire: the scheduler sees bytes
                    fn, args, kwargs = Sealed((fn, args, kwargs)), (), {}
            except Exception as exc:
                failed.append(ev.AttemptDone(launch.key, "error", exc))
                continue
            told = spec(
                launch.key, launch.name, launch.attempt, launch.request, topic, launch.internal
            )
            options = (
                launch.workers,
                launch.strict,
                tuple(sorted(launch.request.items())),
                launch.priority,
            )
            batches.setdefault(options, []).append((launch, fn, told, args, kwargs))
            batched.add(launch.key)
        return failed + self._submit(batches)

    def cancel(self, keys: tuple[str, ...]) -> None:
        futures = []
        for key in keys:
            entry = self.records.in_flight.get(key)
            if (
                entry is not None
                and entry.route == self.name
                and entry.holds
                and entry.value is not None
            ):
                futures.append(entry.value)
        if futures:
            self.carrier.start(dask_compat.cancel, self.carrier.client, futures)

    def resend(self, key: str, value):
        """Put ``value`` (a put lost with its worker) in the cluster again as ``key``."""
        future = self.carrier.client.submit(resent_value, value, key=key, pure=False)
        self.records.track(key, self.name, value=future)
        return future

    def _submit(self, batches: dict) -> list:
        """Submit batched attempts, one ``map`` per set of options; the failures as events."""
        failed = []
        for (workers, strict, request, priority), batch in batches.items():
            pin = (
                {}
                if workers is None
                else {"workers": list(workers), "allow_other_workers": not strict}
            )
            common = {
                "pure": False,
                "resources": dict(request) or None,
                "priority": priority,
                "fifo_timeout": FIFO,
                **pin,
            }
            try:
                futures = self._map(batch, common)
            except Exception:  # find the culprit: one at a time
                futures = []
                for item in batch:
                    try:
                        futures += self._map([item], common)
                    except Exception as exc:
                        futures.append(None)
                        failed.append(ev.AttemptDone(item[0].key, "error", exc))
            for (launch, *_), future in zip(batch, futures, strict=True):
                if future is not None:
                    self.records.track(launch.key, self.name, value=future)
                    self.carrier.start(self._watch, launch.key, future, launch.fetch)
        return failed

    def _map(self, batch: list, options: dict) -> list:
        client = self.carrier.client
        keys = [told["key"] for _, _, told, _, _ in batch]
        if len(batch) == 1:
            _, fn, told, args, kwargs = batch[0]
            return [client.submit(run_task, fn, told, args, kwargs, key=keys[0], **options)]
        columns = zip(*[item[1:] for item in batch], strict=True)
        return client.map(run_task, *columns, key=keys, **options)

    def _call_of(self, launch: ev.Launch) -> tuple:
        """``(fn, args, kwargs, topic)`` of a launch, inputs resolved to Dask futures."""
        records = self.records
        if launch.kind == "task":
            fn, args, kwargs, topic = records.tasks[launch.task_id].payload
            args, kwargs = resolve_inputs((args, kwargs), launch.inputs, records.result_of)
            return fn, args, kwargs, topic
        factory, fargs, fkwargs, topic = records.recipe_of(launch.obj_id)
        if launch.kind == "create":
            return (
                create_object,
                (launch.obj_id, launch.seq, factory, fargs, fkwargs, launch.state),
                {},
                topic,
            )
        if launch.kind == "destroy":
            return destroy_object, (launch.obj_id, launch.seq), {}, topic
        method, margs, mkwargs, _ = method_of(launch, records)
        margs, mkwargs = resolve_inputs((margs, mkwargs), launch.inputs, records.result_of)
        return call_object, (launch.obj_id, launch.seq, method, margs, mkwargs), {}, topic

    async def _watch(self, key: str, future, fetch: bool) -> None:
        carrier = self.carrier
        status, error = await dask_compat.outcome(future)
        value = None
        if status == "finished" and fetch:
            try:
                value = await carrier.client.gather(future, asynchronous=True)
            except Exception as exc:
                status, error = "error", exc
        if status != "finished" and carrier.client.status not in CONNECTED:
            carrier.feed(ev.SchedulerLost(str(carrier.lost_scheduler())))  # Dask cancelled all
            return
        puts = carrier.put_futures
        if status == "cancelled":  # not by us (then nobody waits here): its inputs vanished
            lost = tuple(t for t, f in puts.items() if f.status == "cancelled")
            carrier.feed(ev.InputsLost(key, lost))
            return
        if isinstance(error, KilledWorker) and error.task != key:
            # Not this attempt's worker: an input's (a put value being sent again) died
            # while it was computed. The put goes out again; the attempt is not to blame.
            lost = tuple(t for t, f in puts.items() if f.key == error.task)
            if lost:
                carrier.feed(ev.InputsLost(key, lost))
                return
        lost = isinstance(error, (KilledWorker, WorkerLostError))
        carrier.feed(ev.AttemptDone(key, status, error, lost, value))

    async def fetch(self, held: list, refs: list) -> list:
        """The values of finished futures ``held``; a liveness check instead of a hang.

        Dask recomputes a result lost with its worker, but not one pinned to that
        worker (a stateful call's): it would wait forever for the worker to come
        back. Such a loss raises :class:`WorkerLostError` within ``Timings.fetch_check_s``.
        A fetch still going after ``Timings.holder_silent_s`` looks for results of
        tasks that can be computed again held only by workers that stopped reporting
        (a frozen process: the fetch would wait for it to run again, or for Dask's
        30 s connect time-out) and raises :class:`ResultsLost` for them, naming the
        worker: the engine runs those tasks again elsewhere.
        """
        carrier, timings = self.carrier, self.carrier.state.timings
        client = carrier.client
        pinned = [f for f, ref in zip(held, refs, strict=True) if ref.pinned]
        recomputable = [f for f, ref in zip(held, refs, strict=True) if ref.recipe]
        fetch = asyncio.ensure_future(client.gather(held, asynchronous=True))
        ask_at = time.monotonic() + timings.holder_silent_s
        while True:
            done, _ = await asyncio.wait([fetch], timeout=timings.fetch_check_s)
            if done:
                try:
                    return fetch.result()
                except BaseException as exc:
                    if client.status not in CONNECTED:
                        raise carrier.lost_scheduler() from exc
                    if not isinstance(
                        exc, (KilledWorker, cf.CancelledError, asyncio.CancelledError)
                    ):
                        raise
                    # Lost with its worker, and Dask could not compute it again: what
                    # it was computed from died too (a put has no recipe), or so did
                    # the worker computing it again (the embedded cluster allows no
                    # failure). The engine runs such tasks again.
                    lost = tuple(f.key for f in held if f.status != "finished")
                    if not lost:
                        raise
                    raise ResultsLost(
                        f"the result of {lost[0]} was lost with its worker, and it could "
                        "not be computed again from what is left in the cluster",
                        lost,
                        address=getattr(getattr(exc, "last_worker", None), "address", None),
                    ) from exc
            if client.status not in CONNECTED:
                fetch.cancel()
                raise carrier.lost_scheduler()
            lost = [f for f in pinned if f.status != "finished"]
            if lost:
                fetch.cancel()
                raise WorkerLostError(
                    f"the result of {lost[0].key} was lost with the worker that held it"
                )
            if recomputable and time.monotonic() >= ask_at:
                ask_at = time.monotonic() + timings.holder_silent_s
                silent = await self._silent_holders(recomputable)
                if silent:
                    fetch.cancel()
                    key, address = next(iter(silent.items()))
                    raise ResultsLost(
                        f"the result of {key} is held by {address}, which stopped "
                        "reporting to the scheduler",
                        tuple(silent),
                        address=address,
                        silent=True,
                    )

    async def _silent_holders(self, futures: list) -> dict:
        carrier = self.carrier
        try:
            return await dask_compat.silent_holders(
                carrier.client, [f.key for f in futures], carrier.state.timings.holder_silent_s
            )
        except (OSError, KeyError, TypeError):  # the scheduler is busy or different: wait on
            return {}
