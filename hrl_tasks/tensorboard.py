"""TensorBoard event files of a run's metrics, written when ``tensorboard`` is installed.

``hrl-tasks train`` writes one run into ``OUT/tensorboard/``; ``hrl-tasks tune`` one
run per trial into ``OUT/tensorboard/<trial id>/``, so that ``tensorboard --logdir
OUT/tensorboard`` compares the trials. Each numeric metric is a scalar (nested ones
as ``info/loss_policy``), its step the env steps sampled, as Stable-Baselines3 and
RLlib users know them.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from collections.abc import Iterator, Mapping
from pathlib import Path


def metrics_writer(logdir: str | Path) -> MetricsWriter | None:
    """A writer into ``logdir``, or None when tensorboard is not installed."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    return MetricsWriter(logdir)


class MetricsWriter:
    """Writes each reported result's numbers as scalars of one TensorBoard run."""

    def __init__(self, logdir: str | Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(logdir))

    def write(self, result: Mapping) -> None:
        """One point per numeric metric, at step ``env_steps_sampled``."""
        step = int(result.get("env_steps_sampled", result.get("iteration", 0)))
        for tag, value in scalars(result):
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def scalars(result: Mapping, prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(tag, value)`` for every finite number in ``result``, nested dicts as ``a/b``;
    the engine's own statistics are left out."""
    for key, value in result.items():
        tag = f"{prefix}{key}"
        if key == "engine":
            continue
        if isinstance(value, Mapping):
            yield from scalars(value, f"{tag}/")
        elif is_number(value) and math.isfinite(value):
            yield tag, float(value)


def is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
