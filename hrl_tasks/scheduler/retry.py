"""Retry decisions: pure functions of the policy, the attempt and the failure.

Dask's own ``retries=`` covers exceptions only. Here a lost worker is a failure
like any other: it is retried within the same budget, and every attempt gets a
fresh key, because Dask deduplicates tasks by key and would hand back the
failed result instead of running again.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """How often and on what a task is tried again.

    The default, ``RetryPolicy()``, is the engine's default too: up to three
    retries after lost workers, none after exceptions (a bug raised by the
    task itself would only raise again). ``retries=N`` at submit means
    ``RetryPolicy(N)``: N retries after either.

    Args:
        max_retries: attempts after the first one.
        backoff: seconds before the first retry; doubles with each further one.
        max_backoff: cap on the delay between attempts, in seconds.
        retry_on: exception types that are retried. Lost workers are always
            retried while the budget lasts, whatever this says.

    Example::

        engine.submit(rollout, seed, retries=RetryPolicy(3, backoff=0.5, retry_on=(OSError,)))
    """

    max_retries: int = 3
    backoff: float = 0.0
    max_backoff: float = 30.0
    retry_on: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self):
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise TypeError(f"max_retries must be an int, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoff and max_backoff must be >= 0")
        retry_on = self.retry_on if isinstance(self.retry_on, tuple) else (self.retry_on,)
        for kind in retry_on:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"retry_on must hold exception types, got {kind!r}")
        object.__setattr__(self, "retry_on", retry_on)

    @classmethod
    def coerce(cls, retries: RetryPolicy | int | None, default: RetryPolicy) -> RetryPolicy:
        """Accept ``None`` (the engine's default), an int (that many retries) or a policy."""
        if retries is None:
            return default
        if isinstance(retries, RetryPolicy):
            return retries
        if isinstance(retries, int) and not isinstance(retries, bool):
            return cls(max_retries=retries, retry_on=(Exception,))
        raise TypeError(f"retries must be an int or a RetryPolicy, got {retries!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (the first retry is 1)."""
        if attempt <= 0 or self.backoff == 0:
            return 0.0
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff)


@dataclass(frozen=True)
class Retry:
    """Run the task again as ``attempt`` after ``delay`` seconds."""

    attempt: int
    delay: float


@dataclass(frozen=True)
class GiveUp:
    """Fail the task with ``error``."""

    error: BaseException


def decide(
    policy: RetryPolicy, attempt: int, error: BaseException, worker_lost: bool
) -> Retry | GiveUp:
    """What to do after attempt number ``attempt`` (0 for the first) failed.

    Args:
        policy: the task's retry policy.
        attempt: the attempt that failed, counting from 0.
        error: what it raised (for a lost worker, the error Dask reported).
        worker_lost: whether the attempt failed because its worker died.
    """
    if attempt >= policy.max_retries:
        return GiveUp(error)
    if not worker_lost and not isinstance(error, policy.retry_on):
        return GiveUp(error)
    return Retry(attempt + 1, policy.delay(attempt + 1))
