"""Fault and straggler injection for tests and benchmarks; off unless asked for.

Nothing here runs in a normal program: a worker injects faults only after
:func:`inject_faults` put a :class:`FaultInjector` on it, and
:func:`clear_faults` takes it away.

Example::

    inject_faults(engine, slow_workers={address: 20.0})        # one worker 20x slow
    inject_faults(engine, transient=(0.05, 10.0), seed=1)      # 5% of runs 10x slow
    inject_faults(engine, fail_fraction=0.1)                   # 10% of runs raise
    kill_worker_after(engine, address, delay_s=2.0)            # SIGKILL in 2 s
    clear_faults(engine)
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field

from hrl_tasks.scheduler.context import current_task
from hrl_tasks.scheduler.runtime import WorkerRuntime


class InjectedFault(RuntimeError):
    """Raised by a task that fault injection chose to fail."""


@dataclass
class FaultInjector:
    """Lives on one worker; decides per task run whether to slow it down or fail it.

    Args:
        slow_factor: every run on this worker takes this many times as long.
        transient: ``(probability, factor)``: each run independently takes
            ``factor`` times as long with that probability (a copy draws afresh).
        fail_fraction: probability that a run raises :class:`InjectedFault`.
        names: task names affected; ``None`` for all (the engine's own
            housekeeping calls are never affected).
        seed: seeds this worker's random draws.
        cooperative: the injected extra time ends early when the run is
            cancelled, as in a task that checks ``task_context().cancelled()``
            between steps; otherwise it runs to its end, as Dask would.
    """

    slow_factor: float = 1.0
    transient: tuple[float, float] | None = None
    fail_fraction: float = 0.0
    names: frozenset[str] | None = None
    seed: int | None = None
    cooperative: bool = False
    rng: random.Random = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def applies(self, name: str) -> bool:
        return self.names is None or name in self.names

    def draw(self) -> float:
        with self.lock:
            return self.rng.random()

    def maybe_fail(self, name: str) -> None:
        if self.fail_fraction and self.applies(name) and self.draw() < self.fail_fraction:
            raise InjectedFault(f"fault injection failed this run of {name!r}")

    def maybe_slow_down(self, name: str, elapsed: float) -> None:
        """Sleep so that the run takes its factor times ``elapsed`` in all."""
        if not self.applies(name):
            return
        factor = self.slow_factor
        if self.transient is not None:
            probability, transient_factor = self.transient
            if self.draw() < probability:
                factor *= transient_factor
        if factor <= 1.0:
            return
        extra = (factor - 1.0) * elapsed
        if not self.cooperative:
            time.sleep(extra)
            return
        ctx, deadline = current_task(), time.monotonic() + extra
        while time.monotonic() < deadline and not (ctx and ctx.cancelled()):
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


def _install(config: dict | None, dask_worker=None) -> bool:
    WorkerRuntime.of(dask_worker).faults = None if config is None else FaultInjector(**config)
    return True


def inject_faults(
    engine,
    slow_workers: dict[str, float] | None = None,
    transient: tuple[float, float] | None = None,
    fail_fraction: float = 0.0,
    names: set[str] | None = None,
    seed: int = 0,
    cooperative: bool = False,
) -> None:
    """Put fault injection on the engine's workers (replacing any before).

    Args:
        engine: the :class:`~hrl_tasks.scheduler.engine.Engine`.
        slow_workers: worker address -> slow-down factor.
        transient: ``(probability, factor)`` for every run on every worker.
        fail_fraction: probability that a run raises :class:`InjectedFault`.
        names: task names affected (default all).
        seed: base seed; each worker draws from its own stream.
        cooperative: see :class:`FaultInjector`.
    """
    workers = engine.worker_addresses()
    unknown = set(slow_workers or {}) - set(workers)
    if unknown:
        raise ValueError(f"no such workers: {sorted(unknown)}; the workers are {workers}")
    frozen = None if names is None else frozenset(names)
    for i, address in enumerate(workers):
        config = {
            "slow_factor": (slow_workers or {}).get(address, 1.0),
            "transient": transient,
            "fail_fraction": fail_fraction,
            "names": frozen,
            "seed": seed * 1000 + i,
            "cooperative": cooperative,
        }
        engine.run_on_workers(_install, config, workers=[address])


def clear_faults(engine) -> None:
    """Turn fault injection off on every worker (a worker leaving meanwhile needs none)."""
    engine.run_on_workers(_install, None, on_error="ignore")


def kill_worker_after(engine, address: str, delay_s: float) -> threading.Timer:
    """SIGKILL the process of worker ``address`` after ``delay_s`` seconds (same host only)."""
    pid = engine.run_on_workers(os.getpid, workers=[address])[address]
    timer = threading.Timer(delay_s, os.kill, (pid, signal.SIGKILL))
    timer.daemon = True
    timer.start()
    return timer
