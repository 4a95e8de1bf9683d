"""Running sub-flows together, and queues between a plan and a learner thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

from hrl_tasks.flow.iterators import LocalIterator

CONCURRENCY_MODES = ("round_robin", "async")
STOP_CHECK_S = 0.5  # how often a waiting thread looks whether it should stop


def Concurrently(
    ops: Sequence[LocalIterator],
    mode: str = "round_robin",
    output_indexes: Sequence[int] | None = None,
    round_robin_weights: Sequence[int | str] | None = None,
) -> LocalIterator:
    """Run several sub-flows as one, as in RLlib Flow.

    Args:
        ops: the sub-flows.
        mode: ``"round_robin"`` takes items in turn (``round_robin_weights[i]``
            items from op ``i`` per turn; ``"*"`` is accepted for RLlib
            compatibility and takes one item, as a local iterator cannot tell
            how many are ready); ``"async"`` runs each op in its own thread and
            yields items as they come (the threads stop when their ops end, or
            after their current item once the consumer closes the iterator or
            drops it).
        output_indexes: yield only the items of these ops (the others still run).

    Returns:
        A LocalIterator of the chosen ops' items.
    """
    if mode not in CONCURRENCY_MODES:
        raise ValueError(f"mode must be one of {CONCURRENCY_MODES}, got {mode!r}")
    ops = list(ops)
    keep = set(range(len(ops)) if output_indexes is None else output_indexes)
    if not keep <= set(range(len(ops))):
        raise ValueError(f"output_indexes {sorted(keep)} out of range for {len(ops)} ops")
    weights = list(round_robin_weights or [1] * len(ops))
    if len(weights) != len(ops):
        raise ValueError("round_robin_weights needs one weight per op")
    source = _round_robin(ops, weights) if mode == "round_robin" else _async(ops)
    return LocalIterator((item for index, item in source if index in keep), f"Concurrently({mode})")


def _round_robin(ops, weights):
    while True:
        for index, (op, weight) in enumerate(zip(ops, weights, strict=True)):
            count = 1 if weight == "*" else int(weight)
            for _ in range(count):
                yield index, next(op)


def _async(ops):
    out: queue.Queue = queue.Queue(maxsize=2 * len(ops))
    done = object()
    stop = threading.Event()  # the consumer is gone: the pumps end

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                out.put(entry, timeout=STOP_CHECK_S)
                return True
            except queue.Full:
                continue
        return False

    def pump(index, op):
        try:
            for item in op:
                if not put((index, item)):
                    return
        except BaseException as exc:  # surface a sub-flow's error in the consumer
            put((index, _Failure(exc)))
        put((index, done))

    for index, op in enumerate(ops):
        threading.Thread(target=pump, args=(index, op), daemon=True).start()
    running = len(ops)
    try:
        while running:
            index, item = out.get()
            if item is done:
                running -= 1
            elif isinstance(item, _Failure):
                raise item.error
            else:
                yield index, item
    finally:  # closed, dropped or failed: the threads must not run on
        stop.set()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class Enqueue:
    """Put each item into a queue (for a learner thread); yields the item unchanged.

    Args:
        q: the queue.
        block: wait while the queue is full (else raise ``queue.Full``).
        check: called every ``STOP_CHECK_S`` while waiting; raise from it (e.g.
            "the learner thread died") to stop instead of waiting forever.
    """

    def __init__(self, q: queue.Queue, block: bool = True, check=None):
        self.queue = q
        self.block = block
        self.check = check

    def __call__(self, item):
        if not self.block:
            self.queue.put(item, block=False)
            return item
        while True:
            try:
                self.queue.put(item, timeout=STOP_CHECK_S)
                return item
            except queue.Full:
                if self.check is not None:
                    self.check()


def Dequeue(q: queue.Queue, check=lambda: True) -> LocalIterator:
    """A LocalIterator of the items another thread puts into ``q``.

    Args:
        q: the queue.
        check: called while waiting; raise from it (e.g. "learner thread died")
            to stop instead of waiting forever.
    """

    def items():
        while True:
            try:
                yield q.get(timeout=1.0)
            except queue.Empty:
                check()

    return LocalIterator(items(), "Dequeue")
