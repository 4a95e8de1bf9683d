"""How much replay per env step: a rate limiter in the manner of Reverb's ``SampleToInsertRatio``.

A replay learner that samples as fast as it can learns more per env step when the
rollout workers are slow and less when they are fast, so its learning per env step
depends on the machine. ``training_intensity`` (RLlib's name) fixes the ratio:
rows replayed per env step inserted. The limiter keeps the two counts within
``error_buffer`` rows of that ratio: it refuses a sample that would run ahead of
the inserts, and an insert that would run ahead of the samples.

Like Reverb's (https://github.com/google-deepmind/reverb, ``rate_limiters.py``),
``diff = inserted * samples_per_insert - sampled`` must stay within
``[center - error_buffer, center + error_buffer]``, where ``center`` is
``samples_per_insert * min_size_to_sample``; before ``min_size_to_sample`` rows
are in, nothing is sampled and inserts are never refused. Pure counting: a
synchronous plan asks how many batches it may take now, an asynchronous one
waits on `BlockingLimiter`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


class RateLimiterError(ValueError):
    """A limiter that could deadlock: neither side could ever go on."""


@dataclass
class SampleToInsertRatio:
    """Counts of rows inserted and sampled, and whether either side may go on.

    Args:
        samples_per_insert: rows sampled per row inserted (``training_intensity``).
        min_size_to_sample: rows inserted before the first sample.
        error_buffer: how far, in sampled rows, the counts may drift from the ratio.
    """

    samples_per_insert: float
    min_size_to_sample: int
    error_buffer: float
    inserted: int = 0
    sampled: int = 0

    def __post_init__(self) -> None:
        if not self.samples_per_insert > 0:
            raise RateLimiterError(f"samples_per_insert must be > 0, got {self.samples_per_insert}")
        if self.error_buffer < 0:
            raise RateLimiterError(f"error_buffer must be >= 0, got {self.error_buffer}")

    @classmethod
    def for_batches(
        cls, samples_per_insert: float, min_size_to_sample: int, sample_rows: int, insert_rows: int
    ) -> SampleToInsertRatio:
        """A limiter whose window takes one sampled batch of ``sample_rows`` and one
        insert of ``insert_rows`` at once, so that neither side can wait for the other
        forever (`check_can_progress`)."""
        buffer = sample_rows + samples_per_insert * insert_rows
        return cls(samples_per_insert, min_size_to_sample, buffer)

    @property
    def diff(self) -> float:
        return self.inserted * self.samples_per_insert - self.sampled

    @property
    def center(self) -> float:
        return self.samples_per_insert * self.min_size_to_sample

    def can_insert(self, rows: int) -> bool:
        """Whether ``rows`` more may go in now."""
        if self.inserted < self.min_size_to_sample:
            return True
        return self.diff + rows * self.samples_per_insert <= self.center + self.error_buffer

    def can_sample(self, rows: int) -> bool:
        """Whether ``rows`` may be replayed now."""
        if self.inserted < self.min_size_to_sample:
            return False
        return self.diff - rows >= self.center - self.error_buffer

    def batches_allowed(self, rows: int) -> int:
        """How many batches of ``rows`` may be replayed now, one after another."""
        if self.inserted < self.min_size_to_sample:
            return 0
        return max(0, math.floor((self.diff - (self.center - self.error_buffer)) / rows))

    def insert(self, rows: int) -> None:
        self.inserted += int(rows)

    def sample(self, rows: int) -> None:
        self.sampled += int(rows)

    def check_can_progress(self, sample_rows: int, insert_rows: int) -> None:
        """Raises if a state exists where a batch of ``sample_rows`` may not be sampled
        and an insert of ``insert_rows`` may not go in: a deadlock."""
        needed = sample_rows + self.samples_per_insert * insert_rows
        if 2 * self.error_buffer < needed - 1e-9:
            raise RateLimiterError(
                f"error_buffer {self.error_buffer:g} is too small for batches of {sample_rows} "
                f"rows and inserts of {insert_rows} at {self.samples_per_insert:g} samples per "
                f"insert: it must be at least {needed / 2:g}"
            )

    def state(self) -> dict:
        return {"inserted": self.inserted, "sampled": self.sampled}

    def restore(self, state: dict) -> None:
        self.inserted, self.sampled = int(state["inserted"]), int(state["sampled"])


class BlockingLimiter:
    """A `SampleToInsertRatio` shared by threads: `wait_to_sample` and `wait_to_insert`
    block until the other side has moved (or ``stop`` is set), then count."""

    def __init__(self, ratio: SampleToInsertRatio, stop: threading.Event | None = None):
        self.ratio = ratio
        self.stop = stop or threading.Event()
        self._changed = threading.Condition()

    def wait_to_sample(self, rows: int, timeout: float | None = None) -> bool:
        """Counts ``rows`` sampled once allowed; False if ``stop`` or ``timeout`` came first."""
        return self._wait(self.ratio.can_sample, self.ratio.sample, rows, timeout)

    def wait_to_insert(self, rows: int, timeout: float | None = None) -> bool:
        """Counts ``rows`` inserted once allowed; False if ``stop`` or ``timeout`` came first."""
        return self._wait(self.ratio.can_insert, self.ratio.insert, rows, timeout)

    def try_insert(self, rows: int) -> bool:
        """Counts ``rows`` inserted if allowed now; False (nothing counted) if not."""
        with self._changed:
            if not self.ratio.can_insert(rows):
                return False
            self.ratio.insert(rows)
            self._changed.notify_all()
            return True

    def insert(self, rows: int) -> None:
        """Counts ``rows`` inserted without waiting (they are in already)."""
        with self._changed:
            self.ratio.insert(rows)
            self._changed.notify_all()

    def wake(self) -> None:
        """Wake every waiter, e.g. after setting ``stop``."""
        with self._changed:
            self._changed.notify_all()

    def _wait(self, allowed, count, rows: int, timeout: float | None) -> bool:
        with self._changed:
            ok = self._changed.wait_for(
                lambda: self.stop.is_set() or allowed(rows), timeout=timeout
            )
            if not ok or self.stop.is_set():
                return False
            count(rows)
            self._changed.notify_all()
            return True
