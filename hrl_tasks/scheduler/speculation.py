"""Speculative re-execution of stragglers: pure decisions, tested with a fake clock.

Dask cannot stop a running task and has no backup tasks (distributed issue
391). MapReduce's answer is to run a backup copy of a straggling task and take
whichever copy finishes first (Dean and Ghemawat 2004, section 3.6); with short
tasks, as in RL, the copies are cheap.

State the engine keeps (plain data, passed in at each step):
    durations[name]   recent execution times of finished tasks of that name.
    tasks             the live speculative tasks, each with its copies: the
                      worker a copy runs on and when it started executing (or
                      ``None`` while it waits in a queue), and when it was sent.
    free_slots[w]     idle threads per worker.
    WorkerSpeed       how much slower than their name's median each worker's
                      recent tasks were; a known-slow worker gets no new work
                      for a cool-down.

Selection policy of :func:`plan_backups`: a task straggles when its youngest
copy has run longer than ``multiplier`` x the ``quantile`` of its name's
durations (and at least ``min_elapsed_s``), or has waited that long without
starting. Stragglers with fewer than ``1 + max_backups`` started copies (and at
most one more queued) get a backup on a free slot of a worker that runs no copy
of them and is not known to be slow, the longest-running first. With no free
slot, a running straggler's backup is queued behind the one task of a busy
worker (``queue_on_busy``), the one whose task should end soonest; the engine
sends backups with a higher Dask priority, so they start next there.

The defaults follow what the transient-straggler benchmark showed on a full
cluster (docs/benchmarks.md): 1.5 x the median (Spark's default multiplier),
up to two backups (a backup can straggle too), queue behind a busy worker
rather than wait for the round to drain, and three slow tasks in a row before
a worker counts as slow (with two, 5% transient stragglers benched a healthy
worker for half the run). A copy that loses leaves its worker's thread pool
(``WorkerRuntime.detach``): it runs on to its end, ignored, but the next task
does not wait for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SpeculationPolicy:
    """When to launch backup copies of a task marked ``speculative``.

    Args:
        multiplier: a copy straggles past this many times the quantile.
        quantile: which quantile of the name's finished durations to use.
        min_samples: durations needed before any decision (too few: no backups).
        min_elapsed_s: never back up a copy that ran less than this (as Spark's
            ``spark.speculation.minTaskRuntime``, 100 ms: a backup of a shorter task
            rarely finishes first, and each costs a task on another worker).
        max_backups: copies beyond the original, at most.
        slow_factor: a worker whose recent tasks ran this many times slower than
            their names' medians is known to be slow...
        slow_min_samples: ...once this many of its tasks say so...
        slow_cooldown_s: ...and gets no new speculative work for this long.
        queue_on_busy: with no idle thread anywhere, queue a backup behind the
            one task of a worker that runs exactly one per thread (it starts
            when that task ends) instead of waiting for an idle thread.
    """

    multiplier: float = 1.5
    quantile: float = 0.5
    min_samples: int = 5
    min_elapsed_s: float = 0.1
    max_backups: int = 2
    slow_factor: float = 3.0
    slow_min_samples: int = 3
    slow_cooldown_s: float = 30.0
    queue_on_busy: bool = True

    def __post_init__(self):
        if self.multiplier < 1.0:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0.0 < self.quantile <= 1.0:
            raise ValueError(f"quantile must be in (0, 1], got {self.quantile}")
        if self.min_samples < 1 or self.max_backups < 0:
            raise ValueError("min_samples must be >= 1 and max_backups >= 0")

    @classmethod
    def coerce(cls, speculative: bool | SpeculationPolicy | None) -> SpeculationPolicy | None:
        """``True`` means the default policy, ``False``/``None`` no speculation."""
        if speculative is None or speculative is False:
            return None
        if speculative is True:
            return cls()
        if isinstance(speculative, SpeculationPolicy):
            return speculative
        raise TypeError(f"speculative must be a bool or a SpeculationPolicy, got {speculative!r}")

    def threshold(self, durations: Sequence[float]) -> float | None:
        """Seconds after which a copy straggles, or ``None`` with too few samples."""
        if len(durations) < self.min_samples:
            return None
        q = float(np.quantile(np.asarray(durations, dtype=float), self.quantile))
        return max(self.multiplier * q, self.min_elapsed_s)


@dataclass(frozen=True)
class Copy:
    """One running or queued copy of a task."""

    worker: str | None
    started_at: float | None
    submitted_at: float


@dataclass(frozen=True)
class SpecTask:
    """A live speculative task, as the planner sees it."""

    task_id: str
    name: str
    copies: tuple[Copy, ...]
    policy: SpeculationPolicy
    allowed: frozenset[str] | None = None  # workers a backup may go to (None: any)


@dataclass(frozen=True)
class Backup:
    """Launch a backup copy of ``task_id`` on ``worker``."""

    task_id: str
    worker: str


def straggling_for(task: SpecTask, threshold: float, now: float) -> float | None:
    """How far past ``threshold`` the task's youngest copy is; ``None`` if it is not."""
    youngest = max(task.copies, key=lambda c: c.started_at or c.submitted_at)
    since = youngest.started_at if youngest.started_at is not None else youngest.submitted_at
    elapsed = now - since
    return elapsed - threshold if elapsed >= threshold else None


def plan_backups(
    now: float,
    tasks: Sequence[SpecTask],
    durations: Mapping[str, Sequence[float]],
    free_slots: Mapping[str, int],
    slow: frozenset[str] | set[str] = frozenset(),
    busy_since: Mapping[str, float] | None = None,
) -> list[Backup]:
    """The backups to launch now (see the module docstring for the policy).

    ``busy_since[w]``: when the oldest task running on busy worker ``w``
    started; a backup queued behind a busy worker goes to the one whose task
    should end soonest (running longest, but not a straggler itself).
    """
    busy_since = busy_since or {}
    candidates = []
    for task in tasks:
        started = sum(1 for c in task.copies if c.started_at is not None)
        # Copies still queued cost nothing yet (the loser is cancelled before it runs):
        # they count against max_backups only once they start, up to one extra copy.
        if (
            started >= 1 + task.policy.max_backups
            or len(task.copies) >= 2 + task.policy.max_backups
        ):
            continue
        threshold = task.policy.threshold(durations.get(task.name, ()))
        if threshold is None:
            continue
        late = straggling_for(task, threshold, now)
        if late is not None:
            candidates.append((late, task, threshold))
    slots = {w: n for w, n in free_slots.items() if n >= 0 and w not in slow}
    queued_on: set[str] = set()
    backups = []
    for _, task, threshold in sorted(candidates, key=lambda item: -item[0]):
        busy = {c.worker for c in task.copies}
        running = any(c.started_at is not None for c in task.copies)
        may_queue = task.policy.queue_on_busy and running  # queued copies take idle threads only
        choices = [
            w
            for w in slots
            if w not in busy
            and (slots[w] > 0 or (may_queue and free_slots[w] == 0 and w not in queued_on))
            and (task.allowed is None or w in task.allowed)
        ]
        if not choices:
            continue

        def soon_free(w, threshold=threshold):
            elapsed = now - busy_since.get(w, now)
            return elapsed if elapsed < threshold else -1.0

        worker = max(choices, key=lambda w: (slots[w], soon_free(w), w))
        if slots[worker] <= 0:
            queued_on.add(worker)  # one backup waits behind a worker's running task, no more
        slots[worker] -= 1
        backups.append(Backup(task.task_id, worker))
    return backups


@dataclass
class WorkerSpeed:
    """Which workers are known to be slow, from how their tasks compare to the median."""

    policy: SpeculationPolicy = field(default_factory=SpeculationPolicy)
    window: int = 20
    ratios: dict[str, deque] = field(default_factory=dict)
    slow_until: dict[str, float] = field(default_factory=dict)

    def record(self, worker: str, duration: float, typical: float | None, now: float) -> None:
        """Note that a task took ``duration`` on ``worker`` where ``typical`` is usual."""
        if typical is None or typical <= 0:
            return
        ratios = self.ratios.setdefault(worker, deque(maxlen=self.window))
        ratios.append(duration / typical)
        recent = list(ratios)[-self.policy.slow_min_samples :]
        if len(recent) >= self.policy.slow_min_samples and min(recent) >= self.policy.slow_factor:
            self.slow_until[worker] = now + self.policy.slow_cooldown_s

    def slow(self, now: float) -> set[str]:
        """Workers known to be slow at ``now``; the cool-down over, a worker gets another chance."""
        for worker, until in list(self.slow_until.items()):
            if until <= now:
                del self.slow_until[worker]
                self.ratios.pop(worker, None)
        return set(self.slow_until)
