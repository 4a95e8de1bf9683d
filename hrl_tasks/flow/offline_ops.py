"""Recorded experience as a source of training batches: files read as tasks on the workers.

`ReadExperience` reads a recording's files (`hrl_tasks.data.experience`) one task
per file on the cluster's workers, a few files ahead of the learner, in a new
random order each pass over the data. The rows of several files are mixed in a
shuffle pool before batches are drawn from it, so a batch holds steps of many
episodes; the driver holds the pool, never the whole recording. Whatever needs a
whole episode (MARWIL's discounted returns) is computed in the reading task, where
each file's episodes are whole and in time order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.data.experience import read_file, trajectory_order
from hrl_tasks.flow.context import ROWS_READ, FlowContext
from hrl_tasks.flow.iterators import LocalIterator


def read_for_training(
    path: str, columns: Sequence[str] | None, postprocess: Callable | None
) -> dict[str, np.ndarray]:
    """A task: one file's rows in trajectory and step order, postprocessed (per
    trajectory: an episode, or one agent's part of a multi-agent one)."""
    rows = read_file(path, columns)
    order = trajectory_order(rows)
    rows = {k: v[order] for k, v in rows.items()}
    if postprocess is not None:
        rows = dict(postprocess(SampleBatch(rows)).items())
    return {k: v for k, v in rows.items() if k not in ("agent_id", "policy_id")}  # numbers only


class ShufflePool:
    """Rows from several files, drawn at random without replacement. Pure numpy: a draw
    costs its own rows (the rows left move into the holes), not the pool's size."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.rows: dict[str, np.ndarray] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, rows: dict[str, np.ndarray]) -> None:
        if not self.rows:
            self.rows, self.size = {k: np.array(v) for k, v in rows.items()}, len(rows["rewards"])
            return
        common = self.rows.keys() & rows.keys()
        self.rows = {k: np.concatenate([self.rows[k][: self.size], rows[k]]) for k in common}
        self.size += len(rows["rewards"])

    def draw(self, n: int) -> SampleBatch:
        """``n`` rows at random, taken out of the pool."""
        size, n = self.size, min(n, self.size)
        chosen = self.rng.choice(size, size=n, replace=False)
        batch = {k: v[chosen] for k, v in self.rows.items()}
        holes = chosen[chosen < size - n]  # filled by the last rows that stay
        movers = np.setdiff1d(np.arange(size - n, size), chosen, assume_unique=True)
        for values in self.rows.values():
            values[holes] = values[movers]
        self.size = size - n
        return SampleBatch(batch)


def ReadExperience(
    engine: Any,
    files: Sequence[str],
    ctx: FlowContext,
    batch_rows: int,
    rng: np.random.Generator,
    *,
    columns: Sequence[str] | None = None,
    postprocess: Callable | None = None,
    window: int = 4,
    prefetch: int = 2,
) -> LocalIterator:
    """Endless batches of ``batch_rows`` recorded rows, shuffled across ``window`` files.

    Args:
        engine: Runs the reading tasks.
        files: The recording (`hrl_tasks.data.experience.experience_files`).
        ctx: Counts ``experience_rows_read`` and times ``read``.
        batch_rows: Rows per batch.
        rng: Orders the files and draws the rows.
        columns: Only these columns (besides the required ones) are read.
        postprocess: Applied to each file's rows in its task (a picklable function of
            a `SampleBatch` of whole episodes).
        window: Files whose rows are mixed before batches are drawn.
        prefetch: Files being read ahead of the learner.
    """

    def file_order():
        while True:  # each pass over the data in a new order
            yield from (files[i] for i in rng.permutation(len(files)))

    def batches():
        order, pending, pool = file_order(), deque(), ShufflePool(rng)
        rows_per_file: deque[int] = deque(maxlen=window)
        while True:
            while len(pending) < prefetch:
                pending.append(
                    engine.submit(
                        read_for_training, next(order), columns, postprocess, name="read-experience"
                    )
                )
            with ctx.timer("read"):
                rows = pending.popleft().result()
            read = len(rows["rewards"])
            ctx.counters[ROWS_READ] += read
            rows_per_file.append(read)
            pool.add(rows)
            target = max(batch_rows, sum(rows_per_file) * (window - 1) // window)
            while len(pool) >= batch_rows and len(pool) >= target:
                yield pool.draw(batch_rows)

    return LocalIterator(batches(), "ReadExperience")
