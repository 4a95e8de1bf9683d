"""Scaling a cluster to the engine's own work, and keeping a working cluster alive.

Dask's adaptive scaling sizes a cluster from the tasks its scheduler sees; the
engine's direct route and stateful workers are not among them. Here the driver
counts what the engine has to run (`EngineState.demand`: plain tasks not done,
stateful workers alive) and asks the cluster for that many threads' worth of
workers, within ``MIN:MAX``. Which workers go when it shrinks is the
scheduler's choice, from which `downscaling` removes those that work for an
engine.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import NamedTuple

logger = logging.getLogger(__name__)

TICK_S = 1.0  # how often the demand is looked at
SCALE_DOWN_AFTER_S = 10.0  # how long the demand must stay lower before the cluster shrinks
KEEPALIVE_S = 60.0  # how often a working engine shows the scheduler a task


class Bounds(NamedTuple):
    """How many workers an adaptive cluster may have."""

    minimum: int
    maximum: int


def parse_bounds(text: str) -> Bounds:
    """``"MIN:MAX"`` (or ``"N"`` for a fixed size) as `Bounds`. Pure.

    Raises:
        ValueError: naming what was wrong and the form expected.
    """
    low, sep, high = text.partition(":")
    try:
        bounds = Bounds(int(low), int(high if sep else low))
    except ValueError:
        raise ValueError(f"--adapt takes MIN:MAX worker counts, e.g. 1:8; got {text!r}") from None
    if bounds.minimum < 0 or bounds.maximum < max(1, bounds.minimum):
        raise ValueError(f"--adapt {text}: needs 0 <= MIN <= MAX and MAX >= 1")
    return bounds


def wanted_workers(demand: int, threads_per_worker: int, bounds: Bounds) -> int:
    """Workers for ``demand`` threads' worth of work, within ``bounds``. Pure."""
    needed = math.ceil(demand / max(1, threads_per_worker))
    return min(bounds.maximum, max(bounds.minimum, needed))


def next_target(current: int, recent: list[int]) -> int:
    """The size to ask for next, from the wanted sizes of the recent ticks (the
    newest last): up at once; down only to the largest wanted over the whole
    window, so that a lull between iterations does not shrink the cluster. Pure."""
    newest = recent[-1]
    if newest > current:
        return newest
    peak = max(recent)
    return peak if peak < current else current


class ClusterUpkeep:
    """A driver thread that scales ``cluster`` to the engine's work within ``bounds``
    (None: the size stays as asked), and shows the scheduler a task every
    `KEEPALIVE_S` while the engine works (a gateway ends clusters it thinks idle)."""

    def __init__(
        self,
        engine,
        cluster,
        bounds: Bounds | None,
        target: int,
        scale_down_after_s: float = SCALE_DOWN_AFTER_S,
    ):
        self.engine, self.cluster, self.bounds = engine, cluster, bounds
        self.target = target
        self.recent: deque[int] = deque(maxlen=max(1, round(scale_down_after_s / TICK_S)))
        self.stopped = threading.Event()
        self.kept_alive = time.monotonic()
        self.thread = threading.Thread(target=self.run, name="hrl-tasks-upkeep", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.wait(TICK_S):
            try:
                self.tick()
            except Exception as exc:  # the cluster is closing, or did not answer this time
                logger.debug("hrl_tasks: cluster upkeep: %r", exc)

    def tick(self) -> None:
        demand = self.engine.demand()
        if demand and time.monotonic() - self.kept_alive > KEEPALIVE_S:
            from hrl_tasks.scheduler.gateway import keep_cluster_busy

            keep_cluster_busy(self.engine.client)
            self.kept_alive = time.monotonic()
        if self.bounds is None:
            return
        threads = sorted(self.engine.nthreads.values()) or [1]
        self.recent.append(wanted_workers(demand, threads[len(threads) // 2], self.bounds))
        target = next_target(self.target, list(self.recent))
        if target != self.target:
            logger.info("hrl_tasks: scaling the cluster from %d to %d workers", self.target, target)
            self.cluster.scale(target)
            self.target = target

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
