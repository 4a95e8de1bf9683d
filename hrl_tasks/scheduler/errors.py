"""Errors the engine raises instead of hanging."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error raised by the engine itself."""


class ResourceError(EngineError):
    """A resource request that no worker of the cluster could ever satisfy.

    Raised at submit time, so a typo such as ``{"GPU": 1}`` on a CPU-only
    cluster fails at once instead of waiting forever.
    """


class WorkerLostError(EngineError):
    """A worker process died and took something with it that cannot be redone.

    Raised for a task whose retry budget is spent after worker losses, and for
    a stateful-worker call that was in flight when its worker died and whose
    handle does not allow re-issuing calls.

    Attributes:
        address: the worker that was lost, when known.
    """

    def __init__(self, message: str, address: str | None = None):
        super().__init__(message)
        self.address = address

    def __reduce__(self):
        return type(self), (str(self), self.address)


class ResultsLost(WorkerLostError):
    """Results of finished tasks lost with their workers before they were read, which
    Dask cannot compute again (what they were computed from died too, or so did the
    worker computing them again). The engine runs such tasks again.

    Results held only by a worker that stopped reporting (a frozen process) are
    raised so too, ``silent`` set: they run again away from that worker.

    Attributes:
        keys: the Dask keys of the lost results.
        silent: whether the worker (``address``) is silent rather than gone.
    """

    def __init__(
        self, message: str, keys: tuple = (), address: str | None = None, silent: bool = False
    ):
        super().__init__(message, address)
        self.keys = tuple(keys)
        self.silent = silent

    def __reduce__(self):
        return type(self), (str(self), self.keys, self.address, self.silent)


class InputFailedError(EngineError):
    """A direct call's input (another direct call's TaskRef) failed, so the call did
    not run; the input's error is its cause."""


class ObjectStartError(EngineError):
    """A stateful worker's factory raised, or the object could not be placed."""


class SchedulerLostError(EngineError):
    """The client lost its Dask scheduler (its process died or the network failed).

    Dask cancels every future of the client when that happens, so the engine's
    tasks and stateful workers are gone with it: everything waiting fails with
    this error, and so does everything submitted afterwards.
    """
