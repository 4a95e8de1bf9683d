"""The live table of a search: trials running, pending and ended, and the best so far.

Printed in a terminal; in a Jupyter kernel it is one output, updated in place.
"""

from __future__ import annotations

import math
import time
from collections import Counter

STATUS_ORDER = ("RUNNING", "PAUSED", "PENDING", "TERMINATED", "STOPPED", "ERROR")


def render(trials, metric: str, mode: str, max_rows: int = 20) -> str:
    """The table as text: a summary line, then a row per trial (the best first when
    there are more than ``max_rows``)."""
    trials = list(trials)
    counts = Counter(t.status for t in trials)
    summary = ", ".join(f"{counts[s]} {s.lower()}" for s in STATUS_ORDER if counts[s])
    sign = 1.0 if mode == "max" else -1.0
    scored = [t for t in trials if t.best is not None and not math.isnan(t.best)]
    best = max(scored, key=lambda t: sign * t.best, default=None)
    head = f"{len(trials)} trials: {summary or 'none yet'}"
    if best is not None:
        head += f"; best {best.trial_id}: {metric} {best.best:.4g} ({_config(best.config)})"
    if len(trials) > max_rows:
        trials = sorted(trials, key=lambda t: -sign * (t.best if t in scored else -sign * math.inf))
        trials = trials[:max_rows]
    keys = sorted({k for t in trials for k in t.config})
    header = ["trial", "status", "iter", "env steps", metric, *keys]
    rows = [
        [
            t.trial_id,
            t.status.lower(),
            str(t.iterations),
            str(t.env_steps),
            _number(t.last.get(metric)),
            *[_number(t.config.get(k)) for k in keys],
        ]
        for t in trials
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join([head, *lines])


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _config(config: dict) -> str:
    return ", ".join(f"{k}={_number(v)}" for k, v in sorted(config.items()))


class TrialTable:
    """A search reporter: shows the table when a trial's status changes, and at most
    every ``every_s`` seconds otherwise.

    Args:
        every_s: the least time between two tables while nothing ends.
        max_rows: rows shown (the best trials first when there are more).
        write: where the text goes (default ``print``; a Jupyter kernel gets one
            output updated in place).
    """

    def __init__(self, every_s: float = 10.0, max_rows: int = 20, write=None):
        self.every_s, self.max_rows = every_s, max_rows
        self.write = write or _default_writer()
        self.last_shown = -math.inf
        self.last_statuses: dict = {}

    def __call__(self, search) -> None:
        statuses = {t.trial_id: t.status for t in search.trials.values()}
        changed = statuses != self.last_statuses
        if not changed and time.monotonic() - self.last_shown < self.every_s:
            return
        self.show(search)
        self.last_statuses = statuses

    def show(self, search) -> None:
        """Show the table now."""
        self.write(render(search.trials.values(), search.metric, search.mode, self.max_rows))
        self.last_shown = time.monotonic()


def _default_writer():
    """``print``, or in a Jupyter kernel a display that each table replaces."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None or "IPKernelApp" not in shell.config:
        return lambda text: print(text + "\n", flush=True)
    from IPython.display import Pretty, display

    handle = display(Pretty(""), display_id=True)
    return lambda text: handle.update(Pretty(text))
