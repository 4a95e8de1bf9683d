"""Running mean and variance of observations, merged from many workers.

What RLlib's ``MeanStdFilter`` and Stable-Baselines3's ``VecNormalize`` keep: a
count, a mean and a sum of squared deviations per entry, merged with Chan et al.'s
parallel update (Chan, Golub and LeVeque 1979), so that statistics gathered on
several workers and merged equal those of all their rows at once. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RunningStats:
    """Count, mean and sum of squared deviations (``m2``) of rows of one shape."""

    count: float
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> RunningStats:
        return cls(0.0, np.zeros(shape, np.float64), np.zeros(shape, np.float64))

    @classmethod
    def of(cls, rows: np.ndarray, shape: tuple[int, ...]) -> RunningStats:
        """The statistics of ``rows``: arrays of ``shape`` behind any leading axes."""
        flat = np.asarray(rows, np.float64).reshape(-1, *shape)
        mean = flat.mean(axis=0)
        return cls(float(len(flat)), mean, ((flat - mean) ** 2).sum(axis=0))

    @property
    def var(self) -> np.ndarray:
        """The population variance (1 where nothing was counted yet)."""
        if self.count == 0:
            return np.ones_like(self.mean)
        return self.m2 / self.count

    def merge(self, other: RunningStats) -> RunningStats:
        """The statistics of both sets of rows."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / count)
        return RunningStats(count, mean, m2)

    def state(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_state(cls, state: dict) -> RunningStats:
        return cls(
            float(state["count"]),
            np.asarray(state["mean"], np.float64),
            np.asarray(state["m2"], np.float64),
        )
