"""Iterators with the verbs of RLlib Flow: local ones, and parallel ones over workers.

A :class:`LocalIterator` is an ordinary Python iterator with composable verbs
(``for_each``, ``filter``, ``combine``, ``union``). A :class:`ParallelIterator`
has one shard per stateful worker: each step of a shard is one call on that
worker, and ``for_each`` on it runs *on the worker*, fused into the same call.
``gather_sync`` and ``gather_async`` turn it into a local iterator; the async
form keeps ``num_async`` calls in flight per worker, so that the engine's
per-task overhead overlaps with the work.

Example (in-process, with the :class:`~hrl_tasks.SyncEngine`)::

    >>> from hrl_tasks.flow.iterators import LocalIterator
    >>> it = LocalIterator(iter(range(6))).filter(lambda x: x % 2).for_each(lambda x: x * 10)
    >>> list(it)
    [10, 30, 50]
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hrl_tasks.scheduler import WorkerLostError


class LocalIterator:
    """An iterator in the driver, with RLlib Flow's verbs."""

    def __init__(self, source: Iterable, name: str = "LocalIterator"):
        self._it = iter(source)
        self.name = name

    def __iter__(self) -> Iterator:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def for_each(self, fn: Callable[[Any], Any]) -> LocalIterator:
        """Apply ``fn`` to each item."""
        return LocalIterator(map(fn, self), f"{self.name}.for_each()")

    def filter(self, fn: Callable[[Any], bool]) -> LocalIterator:
        """Keep the items for which ``fn`` is true."""
        return LocalIterator(filter(fn, self), f"{self.name}.filter()")

    def combine(self, fn: Callable[[Any], list]) -> LocalIterator:
        """Apply ``fn``, which returns a list, and yield its elements one by one."""
        return LocalIterator(itertools.chain.from_iterable(map(fn, self)), f"{self.name}.combine()")

    def union(self, *others: LocalIterator, deterministic: bool = True) -> LocalIterator:
        """Interleave items of this and other iterators, round robin, until all are spent."""

        def interleave():
            active = [self, *others]
            while active:
                for it in list(active):
                    try:
                        yield next(it)
                    except StopIteration:
                        active.remove(it)

        return LocalIterator(interleave(), f"{self.name}.union()")

    def duplicate(self, n: int, max_buffered: int = 8) -> list[LocalIterator]:
        """``n`` iterators that each yield every item of this one (RLlib Flow's
        ``duplicate``), for sub-flows that consume the same items, e.g. in threads
        of ``Concurrently(mode="async")``. Thread-safe: whichever copy needs an item
        that none has yet takes it from this iterator. A copy that runs ahead waits
        while a slower one has ``max_buffered`` items queued (back-pressure rather
        than unbounded memory); a copy that is closed no longer holds others up."""
        if n < 1:
            raise ValueError(f"duplicate needs n >= 1, got {n}")
        tee = _Tee(self, n, max_buffered)
        return [LocalIterator(tee.items(i), f"{self.name}.duplicate[{i}]") for i in range(n)]

    def take(self, n: int) -> list:
        """The next ``n`` items."""
        return list(itertools.islice(self, n))

    def close(self) -> None:
        """Stop the iterator (and the threads of a ``Concurrently(mode="async")`` in it)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class _Tee:
    """The shared state of `LocalIterator.duplicate`: one queue per copy."""

    def __init__(self, source: LocalIterator, n: int, max_buffered: int) -> None:
        self.source = source
        self.queues: list[collections.deque | None] = [collections.deque() for _ in range(n)]
        self.max_buffered = max(1, int(max_buffered))
        self.changed = threading.Condition()
        self.consumers: list[int | None] = [None] * n  # the thread that last took from each
        self.pulling = False
        self.ended = False

    def items(self, index: int) -> Iterator:
        try:
            while True:
                item = self._next(index)
                if item is _END:
                    return
                yield item
        finally:  # closed or dropped: stop buffering for this copy
            with self.changed:
                self.queues[index] = None
                self.changed.notify_all()

    def _next(self, index: int) -> Any:
        me = threading.get_ident()
        with self.changed:
            self.consumers[index] = me
            while True:
                queue = self.queues[index]
                if queue:
                    item = queue.popleft()
                    self.changed.notify_all()
                    return item
                if self.ended:
                    return _END
                behind = [
                    i
                    for i, q in enumerate(self.queues)
                    if q is not None and len(q) >= self.max_buffered
                ]
                if behind and all(self.consumers[i] == me for i in behind):
                    raise RuntimeError(
                        f"duplicate: copy {index} is {self.max_buffered} items ahead of copy "
                        f"{behind[0]}, which this same thread consumes: it would wait for "
                        "ever. Take items from the copies in step (round robin, one each), "
                        "or consume them in threads"
                    )
                if self.pulling or behind:
                    self.changed.wait(STOP_CHECK_S)
                    continue
                self.pulling = True
                break
        item = _END
        try:  # outside the lock: pulling may take long (sampling)
            item = next(self.source)
        except StopIteration:
            pass
        finally:  # one step under the lock: no copy pulls before the others have the item
            with self.changed:
                self.pulling = False
                if item is _END:
                    self.ended = True
                else:
                    for other, queue in enumerate(self.queues):
                        if queue is not None and other != index:
                            queue.append(item)
                self.changed.notify_all()
        return item


_END = object()
STOP_CHECK_S = 0.5  # how often a waiting copy looks again


class ParallelIterator:
    """One shard per stateful worker; each step of a shard is one call on its worker.

    A call that dies with its worker's process is made again on the re-created
    worker (the engine re-creates it, up to its ``max_restarts``): a lost worker
    costs the items in flight, never the flow. Only when the worker is gone for
    good does its ``WorkerLostError`` reach the consumer.

    Args:
        engine: the engine the workers live on.
        handles: the workers (``WorkerHandle`` or ``SyncHandle``).
        method: the worker method that produces one item, e.g. ``"sample"``.
        transforms: functions ``fn(worker, item) -> item`` applied on the worker.
        speculative: back up straggling calls on idle peers (a ``WorkerGroup``).
        before_call: called with the handle before each call to it; a dict it
            returns is passed to the method as keyword arguments.
        direct: make the calls direct (straight to the workers, not through
            the scheduler; see ``hrl_tasks.scheduler.worker_objects``).
        keep: with ``direct``: each item stays on its worker, and the iterators
            yield its TaskRef (a direct call's argument elsewhere, or ``.result()``).
    """

    def __init__(
        self,
        engine,
        handles: list,
        method: str,
        transforms: tuple = (),
        speculative=False,
        before_call=None,
        direct: bool = False,
        keep: bool = False,
    ):
        if keep and not direct:
            raise ValueError("keep needs direct calls: items stay on their workers only so")
        self.engine = engine
        self.handles = list(handles)
        self.method = method
        self.transforms = tuple(transforms)
        self.speculative = speculative
        self.before_call = before_call  # e.g. re-send weights to a worker that was re-created
        self.direct = direct
        self.keep = keep

    def for_each(self, fn: Callable[[Any, Any], Any]) -> ParallelIterator:
        """Apply ``fn(worker, item)`` on each worker to each of its items."""
        return ParallelIterator(
            self.engine,
            self.handles,
            self.method,
            (*self.transforms, fn),
            self.speculative,
            self.before_call,
            self.direct,
            self.keep,
        )

    def _call(self, handle, relay: bool = False):
        kwargs = (self.before_call(handle) if self.before_call is not None else None) or {}
        options = {"speculative": True} if self.speculative else {}
        if self.direct:
            options["direct"] = True
            if relay:  # one of a round's calls: it may go with its host-mates'
                options["relay"] = True
        if self.keep:
            options["keep"] = True
        if not self.transforms:
            return handle.call(self.method, **kwargs, **options)
        # The method's arguments travel as the call's own (an engine.share value, such
        # as deferred weights, may only be one), named by the pipeline.
        pipeline = _Pipeline(self.method, self.transforms, tuple(kwargs))
        return handle.call("apply", pipeline, *kwargs.values(), **options)

    def gather_sync(self, prefetch: bool = False) -> LocalIterator:
        """Yield, each step, the list of one item from every shard (bulk-synchronous).

        Args:
            prefetch: send the next round's calls before yielding this round's
                items, so the workers work while the consumer does (e.g. while
                the learner learns on this round's batch).
        """

        def rounds():
            refs = self._round()
            while True:
                items = self._gather_round(refs)
                if prefetch:
                    refs = self._round()
                yield items
                if not prefetch:
                    refs = self._round()

        return LocalIterator(rounds(), "ParallelIterator.gather_sync()")

    def _round(self) -> list:
        """One call per shard, handed to the engine together: per host one message
        (`hrl_tasks.scheduler.relay`), when the calls are direct."""
        with self.engine.together():
            return [self._call(h, relay=True) for h in self.handles]

    def _gather_round(self, refs: list) -> list:
        try:
            return self.engine.gather(refs)  # one batch, the usual case
        except WorkerLostError:
            return [
                self._result(handle, ref) for handle, ref in zip(self.handles, refs, strict=True)
            ]

    def _result(self, handle, ref) -> Any:
        """``ref``'s result; if its worker died, the same call again on the new worker."""
        while True:
            try:
                return ref.result()
            except WorkerLostError:
                if not handle.alive:  # out of restarts: nothing left to call
                    raise
                ref = self._call(handle)

    def batch_across_shards(self) -> LocalIterator:
        """The same as :meth:`gather_sync`: each item is the list over shards."""
        return self.gather_sync()

    def gather_async(self, num_async: int = 1) -> LocalIterator:
        """Yield items as soon as any shard has one, keeping ``num_async`` calls per shard."""
        return self.zip_with_source_actor(num_async).for_each(lambda pair: pair[1])

    def zip_with_source_actor(self, num_async: int = 1) -> LocalIterator:
        """Like :meth:`gather_async`, yielding ``(worker handle, item)`` pairs."""
        if num_async < 1:
            raise ValueError(f"num_async must be >= 1, got {num_async}")

        def pairs():
            in_flight = {}
            for handle in self.handles:
                for _ in range(num_async):
                    in_flight[self._call(handle)] = handle
            while in_flight:
                done, _ = self.engine.wait(list(in_flight), return_when="FIRST_COMPLETED")
                for ref in sorted(done, key=lambda r: list(in_flight).index(r)):
                    handle = in_flight.pop(ref)
                    in_flight[self._call(handle)] = handle
                    try:
                        item = self._item(ref)
                    except WorkerLostError:
                        if not handle.alive:
                            raise
                        continue  # lost with its worker; the call just made replaces it
                    yield handle, item

        return LocalIterator(pairs(), "ParallelIterator.zip_with_source_actor()")

    def _item(self, ref) -> Any:
        """A finished call's item: its value, or with ``keep`` the TaskRef itself."""
        if not self.keep:
            return ref.result()
        error = ref.exception()
        if error is not None:
            raise error
        return ref


class _Pipeline:
    """Picklable: ``method`` of the worker, then each transform, in one call; the
    method's keyword arguments ``names`` are the call's arguments after it."""

    def __init__(self, method: str, transforms: tuple, names: tuple[str, ...] = ()):
        self.method = method
        self.transforms = transforms
        self.names = names

    def __call__(self, worker, *values):
        item = getattr(worker, self.method)(**dict(zip(self.names, values, strict=True)))
        for fn in self.transforms:
            item = fn(worker, item)
        return item
