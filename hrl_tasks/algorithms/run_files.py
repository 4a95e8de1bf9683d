"""What a training run writes into its directory, for the command line and for
``hrl_tasks.train(out=...)`` alike.

``metrics.jsonl`` (one line per iteration, appended when a run resumes) and
``checkpoints/checkpoint-NNNNNN.hrl`` every ``checkpoint_every`` iterations and
at the end, the ``keep`` of the highest iterations kept. Usage::

    with RunFiles(out, checkpoint_every=10, keep=5) as files:
        while not done:
            result = algo.train()
            files.record(algo, result)
        files.save(algo, result["iteration"])
"""

from __future__ import annotations

import json
from pathlib import Path

from hrl_tasks.algorithms.checkpoint import prune_checkpoints, run_checkpoints
from hrl_tasks.jsonable import jsonable
from hrl_tasks.run_dir import remove_stale_writes

METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


class RunFiles:
    """A run's ``metrics.jsonl`` and checkpoints in ``out`` (a directory the run owns:
    `hrl_tasks.run_dir.claim` gives one)."""

    def __init__(self, out: Path, checkpoint_every: int = 10, keep: int = 5):
        self.out = Path(out)
        self.checkpoint_every = checkpoint_every
        self.keep = keep
        self.log = None

    def __enter__(self) -> RunFiles:
        self.out.mkdir(parents=True, exist_ok=True)
        remove_stale_writes(self.out / CHECKPOINTS)  # of a process that died mid-write
        self.log = (self.out / METRICS).open("a")
        return self

    def __exit__(self, *exc) -> None:
        self.log.close()

    def record(self, algo, result: dict) -> None:
        """An iteration's metrics line, and its checkpoint if one is due."""
        self.log.write(json.dumps(jsonable(result)) + "\n")
        self.log.flush()
        if result["iteration"] % self.checkpoint_every == 0:
            self.save(algo, result["iteration"])

    def save(self, algo, iteration: int) -> Path:
        """``checkpoints/checkpoint-<iteration>.hrl``, then the older ones beyond ``keep``
        deleted."""
        path = algo.save(self.out / CHECKPOINTS / f"checkpoint-{iteration:06d}.hrl")
        prune_checkpoints(self.out / CHECKPOINTS, self.keep)
        return path

    def last_checkpoint(self) -> Path | None:
        """The checkpoint of the highest iteration, if any."""
        found = run_checkpoints(self.out / CHECKPOINTS)
        return found[-1] if found else None
