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
"""

from __future__ import annotations

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
    turn: int = 0,
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
        turn: breaks ties between equally loaded workers in rotation, so equal
            work spreads evenly.
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
        room = sorted(close)
    ordered = sorted(room)
    count = len(ordered)
    return min(
        ordered,
        key=lambda w: (
            in_flight.get(w, 0) / max(1, nthreads[w]),
            (ordered.index(w) - turn) % count,
        ),
    )
