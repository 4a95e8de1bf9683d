"""The driver's waits on the engine: none without a bound, none in silence.

A deadline (``Engine.time_limit(seconds)``, what ``--stop-time`` and
``stop={"time_total_s": ...}`` set) ends every wait that reaches it with
:class:`DeadlineReached`, whatever the wait is for. A wait that sees no
progress (no attempt started or ended, no worker came or went) for
``stall_warning_s`` logs what it waits for: each task's story
(:meth:`Engine.story`). One daemon thread per engine looks at the waits, every
few seconds, and only while there are some.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

from hrl_tasks.scheduler.errors import EngineError

logger = logging.getLogger("hrl_tasks.scheduler")
LOOK_EVERY_S = 2.0
STORIES_SHOWN = 3


class DeadlineReached(EngineError, TimeoutError):
    """A wait on the engine reached the run's time limit (``Engine.time_limit``)."""


class WaitWatch:
    """Deadlines and stall warnings for the waits of one engine.

    Args:
        progress_at: the monotonic time of the engine's last progress.
        story: a task's story, for the warning.
        stall_warning_s: seconds without progress before a wait says what it
            waits for (then again after as many more); None: never.
    """

    def __init__(
        self,
        progress_at: Callable[[], float],
        story: Callable[[object], str],
        stall_warning_s: float | None = 60.0,
    ):
        self.progress_at = progress_at
        self.story = story
        self.stall_warning_s = stall_warning_s
        self.deadline: float | None = None
        self.waits: dict[int, tuple[float, list, str]] = {}  # id -> (since, refs, what)
        self.warned: dict[int, float] = {}  # id -> when it last warned
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.thread: threading.Thread | None = None
        self.closed = False

    # --- the deadline ---------------------------------------------------------------

    @contextmanager
    def time_limit(self, seconds: float | None):
        """Within the block, every wait ends by ``seconds`` from now (None: no limit)."""
        before = self.deadline
        if seconds is not None:
            at = time.monotonic() + max(0.0, float(seconds))
            self.deadline = at if before is None else min(before, at)
        try:
            yield
        finally:
            self.deadline = before

    def bound(self, timeout: float | None) -> float | None:
        """``timeout`` shortened to the deadline; raises once the deadline has passed."""
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.reached()
        return left if timeout is None else min(timeout, left)

    def reached(self) -> DeadlineReached:
        return DeadlineReached("the run's time limit was reached while waiting on the engine")

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline - 1e-3

    # --- stall warnings -------------------------------------------------------------

    @contextmanager
    def waiting(self, refs: list, what: str):
        """Register a wait for ``refs`` for the stall warnings, for the block's length."""
        if self.stall_warning_s is None or not refs:
            yield
            return
        wait_id = next(self.ids)
        with self.lock:
            self.waits[wait_id] = (time.monotonic(), refs, what)
            if self.thread is None and not self.closed:
                self.thread = threading.Thread(
                    target=self._look, daemon=True, name="hrl-tasks-wait-watch"
                )
                self.thread.start()
        try:
            yield
        finally:
            with self.lock:
                self.waits.pop(wait_id, None)
                self.warned.pop(wait_id, None)

    def stalled(self, now: float) -> list[tuple[int, list, str, float]]:
        """The waits to warn about now: ``(id, refs, what, seconds waited)``."""
        quiet_since = self.progress_at()
        found = []
        with self.lock:
            for wait_id, (since, refs, what) in self.waits.items():
                last = max(since, quiet_since, self.warned.get(wait_id, since))
                if now - last >= self.stall_warning_s:
                    self.warned[wait_id] = now
                    found.append((wait_id, refs, what, now - since))
        return found

    def _look(self) -> None:
        while not self.closed:
            time.sleep(min(LOOK_EVERY_S, self.stall_warning_s / 4))
            for _, refs, what, waited in self.stalled(time.monotonic()):
                pending = [r for r in refs if not r.done()] or refs
                stories = "\n".join(self.story(r) for r in pending[:STORIES_SHOWN])
                logger.warning(
                    "hrl_tasks: %s has waited %.0f s for %d of %d tasks with no progress in "
                    "the engine (no attempt started or ended, no worker came or went):\n%s",
                    what,
                    waited,
                    len(pending),
                    len(refs),
                    stories,
                )

    def close(self) -> None:
        self.closed = True
