"""Where a plain task of the direct route goes: a pure choice, tested without a cluster.

The engine sends a worker at most a pipeline's depth of attempts per thread
before the earlier ones end: one runs in each slot and the next wait on the
worker, so a slot that frees starts its next task without waiting a round trip
for it. The depth is ``PIPELINE`` for tasks of unknown or long duration, deeper
for short ones (about ``PIPELINE_WORK_S`` of work queued per thread, at most
``MAX_PIPELINE``): many tasks then travel in one message each way. The rest
wait in the engine, first come first served, and go to whichever worker frees
first. (A worker also queues what other engines send it: its slots are
shared, and it never runs more tasks than it has threads.)

Among workers equally loaded, the one whose load changed longest ago goes
first, so equal work spreads in turn. `LeastLoaded` keeps the workers in that
order as their loads change: the engine's choice costs the same with 16
workers or 4,096, not a look at every worker; `choose_worker` is the same rule
over any view (and with a task's resources), for the choices the order cannot
answer alone.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping

from hrl_tasks.scheduler.resources import fits

PIPELINE = 2  # attempts in flight per worker thread, for tasks of unknown or long duration
PIPELINE_WORK_S = 0.005  # for short tasks: about this much work in flight per thread
MAX_PIPELINE = 64


def pipeline_depth(typical_s: float | None) -> int:
    """Attempts in flight per thread for tasks that typically take ``typical_s``."""
    if typical_s is None:
        return PIPELINE
    deep = math.ceil(PIPELINE_WORK_S / max(typical_s, 1e-6))
    return int(min(MAX_PIPELINE, max(PIPELINE, deep)))


def choose_worker(
    nthreads: Mapping[str, int],
    in_flight: Mapping[str, int],
    request: Mapping[str, float] = {},  # noqa: B006 - read only
    free: Mapping[str, Mapping[str, float]] | None = None,
    near: Iterable[str] = (),
    only: Iterable[str] | None = None,
    avoid: Iterable[str] = (),
    since: Mapping[str, int] = {},  # noqa: B006 - read only
    depth: int = PIPELINE,
) -> str | None:
    """The worker to send a task to now, or ``None`` if every worker is full.

    Args:
        nthreads: threads per live worker.
        in_flight: attempts this engine has sent to each worker that have not ended.
        request: the task's resources; a worker takes it only if they fit in
            ``free[worker]`` (what is not held there), and then one at a time
            per thread, without the pipeline.
        near: workers holding the task's inputs: preferred when they have room.
        only: the workers to choose from (``None``: all), e.g. those not slow.
        avoid: workers to use only when no other has room.
        since: when each worker's load last changed (a count, `LeastLoaded.since`):
            among equally loaded workers the one unchanged longest goes first, so
            equal work spreads in turn (then by name).
        depth: attempts in flight per thread (see `pipeline_depth`).
    """
    allowed = set(nthreads) if only is None else set(only) & set(nthreads)
    room = []
    for worker in allowed:
        threads = max(1, nthreads[worker])
        limit = threads if request else threads * depth
        if in_flight.get(worker, 0) >= limit:
            continue
        if request and not fits(request, (free or {}).get(worker, {})):
            continue
        room.append(worker)
    if not room:
        return None
    avoided = set(avoid)
    room = [w for w in room if w not in avoided] or room
    close = set(near) & set(room)
    if close:
        room = list(close)
    return min(
        room,
        key=lambda w: (in_flight.get(w, 0) / max(1, nthreads[w]), since.get(w, -1), w),
    )


class LeastLoaded:
    """Live workers in the order `choose_worker` takes them, kept as their loads change.

    ``choose(depth, near, skip)`` is ``choose_worker`` (without resources) over these
    workers less ``skip``, in time that does not grow with the workers: one bucket
    per load (attempts per thread), each in the order its workers came into it (the
    one unchanged longest first), and the few distinct loads kept sorted.
    """

    def __init__(self):
        self._buckets: dict[float, dict[str, int]] = {}  # load -> worker -> change, in order
        self._loads: list[float] = []  # the buckets' loads, sorted
        self._counts: dict[str, tuple[int, int]] = {}  # worker -> (in flight, threads)
        self._changes = itertools.count()

    def set(self, worker: str, in_flight: int, threads: int) -> None:
        """``worker`` is live with ``in_flight`` attempts on ``threads`` threads."""
        if self._counts.get(worker) == (in_flight, threads):
            return
        self.remove(worker)
        self._counts[worker] = (in_flight, threads)
        load = in_flight / max(1, threads)
        bucket = self._buckets.get(load)
        if bucket is None:
            bucket = self._buckets[load] = {}
            bisect.insort(self._loads, load)
        bucket[worker] = next(self._changes)

    def remove(self, worker: str) -> None:
        """``worker`` is gone."""
        counts = self._counts.pop(worker, None)
        if counts is None:
            return
        load = counts[0] / max(1, counts[1])
        bucket = self._buckets[load]
        del bucket[worker]
        if not bucket:
            del self._buckets[load]
            self._loads.pop(bisect.bisect_left(self._loads, load))

    def counts(self) -> dict[str, tuple[int, int]]:
        """Each live worker's ``(in flight, threads)``."""
        return dict(self._counts)

    def since(self) -> dict[str, int]:
        """When each live worker's load last changed (``choose_worker``'s ``since``)."""
        return {w: change for bucket in self._buckets.values() for w, change in bucket.items()}

    def choose(
        self, depth: int = PIPELINE, near: Iterable[str] = (), skip: Iterable[str] = ()
    ) -> str | None:
        """The worker ``choose_worker`` would choose among these less ``skip``."""
        skipped = skip if isinstance(skip, (set, frozenset)) else set(skip)
        if near:
            close = []
            for worker in set(near):
                counts = self._counts.get(worker)
                if counts is None or worker in skipped:
                    continue
                load = counts[0] / max(1, counts[1])
                if load < depth:
                    close.append((load, self._buckets[load][worker], worker))
            if close:
                return min(close)[2]
        for load in self._loads:
            if load >= depth:
                return None  # the least loaded left is full: all are
            for worker in self._buckets[load]:
                if worker not in skipped:
                    return worker
        return None
