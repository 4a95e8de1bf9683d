"""IMPALA's learner thread in the driver, and the operators that feed it and read it
(and `FeedLearner`, which feeds a learner in a process of its own).

The sampling side (the thread of ``Algorithm.train()``) puts ``(source worker,
batch)`` pairs into the learner's inbox with ``flow.Enqueue``; the learner
thread concatenates them to ``train_batch_size`` steps, takes one V-trace step
and sends the new weights to the workers whose batches it used. Only the
learner thread touches the policy while training; checkpoints and evaluation
take its ``lock``. A failure of the learner thread is raised in the sampling
side by `LearnerThread.check` (the inbox calls it while it waits), so
``train()`` fails instead of waiting forever.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.flow import STEPS_SAMPLED, STEPS_TRAINED, FlowContext

POLL_S = 0.1


class LearnerError(RuntimeError):
    """The learner thread failed (the cause is chained) or is not running."""


class _Inbox(queue.Queue):
    """A bounded queue whose blocking ``put`` gives up when the learner cannot take items."""

    def __init__(self, maxsize: int, check):
        super().__init__(maxsize)
        self._check = check

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        if not block or timeout is not None:
            return super().put(item, block, timeout)
        while True:
            self._check()
            try:
                return super().put(item, timeout=POLL_S)
            except queue.Full:
                continue


class LearnerThread(threading.Thread):
    """Trains the driver's policy on ``(source, batch)`` pairs from ``inqueue``.

    Usage::

        learner = LearnerThread(workers, train_batch_size=256, queue_size=4)
        learner.start()
        learner.inqueue.put((handle, batch))    # waits while full; raises if the learner failed
        steps, info, learn_s = learner.outqueue.get()
        learner.stop()

    Args:
        workers: the ``WorkerSet``; its local worker holds the policy.
        train_batch_size: env steps per learner step (batches are concatenated).
        queue_size: batches the inbox holds before ``put`` waits.
    """

    def __init__(self, workers, train_batch_size: int, queue_size: int):
        super().__init__(name="impala-learner", daemon=True)
        self.workers = workers
        self.train_batch_size = train_batch_size
        self.inqueue: queue.Queue = _Inbox(queue_size, self.check)
        self.outqueue: queue.Queue = queue.Queue()
        self.lock = threading.Lock()  # held while the policy changes
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        pending: list[tuple[Any, SampleBatch]] = []
        try:
            while not self.stopped.is_set():
                try:
                    pending.append(self.inqueue.get(timeout=POLL_S))
                except queue.Empty:
                    continue
                if sum(batch.env_steps() for _, batch in pending) >= self.train_batch_size:
                    self.step(pending)
                    pending = []
        except BaseException as exc:  # kept for check(), raised in train()
            self.error = exc

    def step(self, items: list[tuple[Any, SampleBatch]]) -> None:
        """One V-trace step on the items' batches; new weights to their sources."""
        batch = SampleBatch.concat_samples([b for _, b in items])
        sources = list({id(h): h for h, _ in items}.values())
        with self.lock:
            start = time.perf_counter()
            info = self.workers.learner.learn_on_batch(batch)
            # The weights ride on each source's next sample call (no extra call).
            self.workers.sync_weights(to=sources, defer=True)
            elapsed = time.perf_counter() - start
        self.outqueue.put((batch.env_steps(), info, elapsed))

    def check(self) -> None:
        """Raise `LearnerError` if the thread failed or is not running."""
        if self.error is not None:
            raise LearnerError(f"the learner thread failed: {self.error!r}") from self.error
        if not self.is_alive():
            raise LearnerError("the learner thread is not running (stopped, or never started)")

    def stop(self, timeout: float = 30.0) -> None:
        """End the thread after its current step (idempotent)."""
        self.stopped.set()
        if self.is_alive():
            self.join(timeout)


class RecordSampled:
    """Count a ``(source, (batch, metrics))`` pair's steps and episodes; yields ``(source, batch)``."""

    def __init__(self, ctx: FlowContext):
        self.ctx = ctx

    def __call__(self, item):
        source, (batch, metrics) = item
        self.ctx.counters[STEPS_SAMPLED] += batch.env_steps()
        self.ctx.add_episodes(metrics)
        self.ctx.counters["env_errors"] += int(metrics.get("env_errors", 0))
        return source, batch


class RecordLearnerSteps:
    """Take the learner's finished steps without waiting (raising its failure); passes items on.

    Info: the learner's latest, plus ``learner_queue_size`` (batches waiting)
    and ``learner_steps`` (steps taken in all).
    """

    def __init__(self, learner: LearnerThread, ctx: FlowContext):
        self.learner = learner
        self.ctx = ctx

    def __call__(self, item):
        self.learner.check()
        while True:
            try:
                steps, info, elapsed = self.learner.outqueue.get_nowait()
            except queue.Empty:
                break
            self.ctx.counters[STEPS_TRAINED] += steps
            self.ctx.counters["learner_steps"] += 1
            self.ctx.timers["learn"] += elapsed
            self.ctx.info = {k: float(v) for k, v in info.items() if np.ndim(v) == 0}
        self.ctx.info["learner_queue_size"] = self.learner.inqueue.qsize()
        self.ctx.info["learner_steps"] = self.ctx.counters["learner_steps"]
        return item
