"""A synchronous, in-process engine with the same API, for debugging and fast tests.

``SyncEngine`` runs each task at once in the calling thread, applies the same
retry rules as the Dask backend, and keeps stateful workers as plain objects.
Breakpoints and stack traces work as in ordinary Python.

Example::

    with SyncEngine() as engine:
        assert engine.submit(pow, 2, 10).result() == 1024
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from hrl_tasks.scheduler import retry as retry_rules
from hrl_tasks.scheduler.engine import _ACTIVE_ENGINE, RETURN_WHEN
from hrl_tasks.scheduler.errors import ObjectStartError
from hrl_tasks.scheduler.resources import Ledger, normalize_request
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.stats import EngineStats
from hrl_tasks.scheduler.taskref import collect_refs
from hrl_tasks.scheduler.worker_side import _CURRENT_TASK, TaskContext


class SyncRef:
    """The in-process counterpart of :class:`~hrl_tasks.scheduler.taskref.TaskRef`."""

    def __init__(self, name: str, key: str):
        self.name = name
        self.key = key
        self.attempts = 0
        self._outcome: cf.Future = cf.Future()

    def done(self) -> bool:
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> Any:
        return self._outcome.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._outcome.exception(timeout)

    def cancel(self) -> bool:
        return False  # it already ran

    def __repr__(self) -> str:
        return f"<SyncRef {self.name} key={self.key}>"


def _resolve(obj):
    if isinstance(obj, SyncRef):
        return obj.result()
    if isinstance(obj, (list, tuple, set, frozenset)):
        return type(obj)(_resolve(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _resolve(v) for k, v in obj.items()}
    return obj


class SyncHandle:
    """A stateful worker of the :class:`SyncEngine`: the object, in this process."""

    def __init__(self, engine: SyncEngine, name: str, obj: Any):
        self.engine = engine
        self.name = name
        self.address = "inprocess"
        self.restarts = 0
        self._obj = obj

    def call(self, method: str, *args, speculative=False, direct=False, **kwargs) -> SyncRef:
        bound = getattr(self._obj, method)
        return self.engine.submit(bound, *args, name=f"{self.name}.{method}", **kwargs)

    def ready(self, timeout: float | None = None) -> SyncHandle:
        return self

    def kill(self, timeout: float | None = None) -> None:
        close = getattr(self._obj, "close", None)
        if callable(close):
            close()


class SyncEngine:
    """Everything in-process: ``submit`` runs the function before it returns.

    Args:
        resources: what the single in-process "worker" declares, for the same
            :class:`ResourceError` checks as a cluster (default ``{"CPU": 1}``).
        retries: the default retry policy.
    """

    def __init__(self, resources: dict | None = None, retries: RetryPolicy | int | None = None):
        self.ledger = Ledger()
        self.ledger.add_worker("inprocess", resources or {"CPU": 1})
        self.default_retries = RetryPolicy.coerce(retries, RetryPolicy())
        self.dashboard_link = None
        self.closed = False
        self._stats = EngineStats()
        self._keys = itertools.count()
        self.local_cache: dict = {}  # worker_local() objects
        self.local_cache_lock = threading.Lock()
        self._token = _ACTIVE_ENGINE.set(self)

    def __enter__(self) -> SyncEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                _ACTIVE_ENGINE.reset(self._token)
            except ValueError:
                _ACTIVE_ENGINE.set(None)

    def check_resources(self, request: dict) -> None:
        self.ledger.check(request)

    def submit(
        self, fn, *args, resources=None, retries=None, speculative=False, name=None, **kwargs
    ):
        """Run ``fn`` now, with retries; returns a finished :class:`SyncRef`."""
        request = normalize_request(resources)
        self.check_resources(request)
        policy = RetryPolicy.coerce(retries, self.default_retries)
        name = name or getattr(fn, "__name__", "task")
        ref = SyncRef(name, f"{name}-{next(self._keys)}")
        self._stats.count("submitted")
        deps: list = []
        collect_refs((args, kwargs), deps)
        for dep in deps:
            if isinstance(dep, SyncRef) and dep.exception() is not None:
                ref._outcome.set_exception(dep.exception())
                self._stats.count("failed")
                return ref
        attempt = 0
        while True:
            ref.attempts += 1
            ctx = TaskContext(ref.key, name, attempt, request, topic="inprocess")
            token = _CURRENT_TASK.set(ctx)
            start = time.perf_counter()
            try:
                value = fn(*_resolve(args), **_resolve(kwargs))
            except Exception as exc:
                decision = retry_rules.decide(policy, attempt, exc, worker_lost=False)
                if isinstance(decision, retry_rules.GiveUp):
                    ref._outcome.set_exception(exc)
                    self._stats.count("failed")
                    return ref
                self._stats.count("retried")
                time.sleep(decision.delay)
                attempt = decision.attempt
                continue
            finally:
                _CURRENT_TASK.reset(token)
                self._stats.record_duration(name, time.perf_counter() - start)
            ref._outcome.set_result(value)
            self._stats.count("finished")
            return ref

    def put(self, value, worker: str | None = None) -> SyncRef:
        """A finished ref holding ``value`` (``worker`` is ignored: there is one process)."""
        ref = SyncRef("put", f"put-{next(self._keys)}")
        ref._outcome.set_result(value)
        return ref

    @staticmethod
    def share(value):
        """``value`` itself: in-process calls need no upload."""
        return value

    def reaches_workers(self, timeout: float = 5.0) -> bool:
        """Always: the one "worker" is this process."""
        return True

    def map(self, fn, *iterables, **submit_kwargs) -> list[SyncRef]:
        return [self.submit(fn, *args, **submit_kwargs) for args in zip(*iterables, strict=True)]

    def gather(self, refs: Iterable[SyncRef], timeout: float | None = None) -> list:
        return [ref.result() for ref in refs]

    def wait(self, refs, timeout=None, return_when="ALL_COMPLETED"):
        if return_when not in RETURN_WHEN:
            raise ValueError(
                f"return_when must be one of {sorted(RETURN_WHEN)}, got {return_when!r}"
            )
        return set(refs), set()

    def as_completed(self, refs, timeout=None) -> Iterator[SyncRef]:
        yield from refs

    def create_worker(self, cls_or_factory, *args, resources=None, strategy="spread", name=None,
                      max_restarts=3, reissue_calls=False, label=None, **kwargs) -> SyncHandle:  # fmt: skip
        self.check_resources(normalize_request(resources))
        name = name or getattr(cls_or_factory, "__name__", "object")
        try:
            obj = cls_or_factory(*args, **kwargs)
        except Exception as exc:
            raise ObjectStartError(f"stateful worker {name!r} failed to start: {exc}") from exc
        return SyncHandle(self, name, obj)

    def create_group(self, cls_or_factory, n: int, *args, **kwargs) -> list[SyncHandle]:
        """``n`` objects; speculative calls run once (there are no stragglers in-process)."""
        base = kwargs.pop("name", None) or getattr(cls_or_factory, "__name__", "object")
        return [self.create_worker(cls_or_factory, *args, name=base, **kwargs) for _ in range(n)]

    def stats(self) -> dict:
        return self._stats.snapshot()
