"""Engine counters and per-name duration statistics (plain state, no I/O)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

COUNTERS = (
    "submitted",
    "finished",
    "failed",
    "retried",
    "cancelled",
    "workers_lost",
    "inputs_resent",
    "recomputed",
    "moved_from_silent",
    "speculated",
    "backup_won",
    "original_won",
    "time_saved_s",
    "objects_recreated",
)
NAMES_KEPT = 1_000  # task names with durations; a name not seen for longest goes first


@dataclass
class DurationWindow:
    """The last ``size`` durations of one task name, in seconds."""

    size: int = 1000
    values: deque = field(default_factory=deque)
    count: int = 0
    total_s: float = 0.0  # of every duration added, not only the window's

    def add(self, seconds: float) -> None:
        self.values.append(seconds)
        self.count += 1
        self.total_s += seconds
        while len(self.values) > self.size:
            self.values.popleft()

    def quantile(self, q: float) -> float | None:
        if not self.values:
            return None
        return float(np.quantile(np.fromiter(self.values, float), q))

    def summary(self) -> dict:
        if not self.values:
            return {"count": self.count, "total_s": self.total_s}
        arr = np.fromiter(self.values, float)
        p50, p90, p99 = np.quantile(arr, [0.5, 0.9, 0.99])
        return {
            "count": self.count,
            "total_s": self.total_s,
            "mean": float(arr.mean()),
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "max": float(arr.max()),
        }


@dataclass
class EngineStats:
    """What ``engine.stats()`` reports: counters and durations per task name.

    Durations are execution times measured on the worker, from the start of
    the function to its end, not from submission.
    """

    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    durations: dict[str, DurationWindow] = field(default_factory=dict)

    def count(self, counter: str, n: float = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n

    def record_duration(self, name: str, seconds: float) -> None:
        """Add a duration of ``name`` (see :func:`remember`)."""
        remember(self.durations, name, self.durations.get(name) or DurationWindow()).add(seconds)

    def snapshot(self) -> dict:
        return {
            **self.counters,
            "by_name": {name: w.summary() for name, w in sorted(self.durations.items())},
        }


def remember(table: dict, name: str, value):
    """``table[name] = value``, ``name`` now the newest; the names not seen for longest
    go beyond ``NAMES_KEPT`` (names made per task, such as a trial's, come and go).
    Returns ``value``."""
    table.pop(name, None)
    table[name] = value
    if len(table) > NAMES_KEPT:
        del table[next(iter(table))]
    return value
