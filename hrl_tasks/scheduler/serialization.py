"""How types of the layers above travel between processes: the engine's door to Dask's
serializer families, so that those layers never import ``distributed``.

A layer registers its types with `register_serializer`. It does so when it is imported
in a process that has the engine already; in a process that imported it first, the
engine calls the functions of ``hrl_tasks.registry.SERIALIZER_PATHS`` the first time
Dask sends or receives one of the package's types (Dask's lazy registration).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from distributed.protocol.pickle import dumps, loads
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from hrl_tasks.registry import SERIALIZER_PATHS, load_object

Frames = Sequence[bytes | memoryview]


def register_serializer(
    cls: type,
    dumps: Callable[[Any], tuple[dict, list]],
    loads: Callable[[dict, Frames], Any],
) -> None:
    """Send instances of ``cls`` as ``dumps(obj) -> (header, frames)`` and rebuild them
    with ``loads(header, frames)`` instead of pickling them (Dask's "dask" family).

    The header must be msgpack-able; frames are sent as they are, without a copy.
    Safe to call more than once.
    """
    dask_serialize.register(cls, dumps)
    dask_deserialize.register(cls, loads)


def register_package_serializers(package: str = "hrl_tasks") -> None:
    """Have Dask call each function of ``SERIALIZER_PATHS`` the first time it looks up a
    serializer for a type of ``package`` (the lookup then finds what they registered)."""

    def register_all() -> None:
        for path in SERIALIZER_PATHS:
            load_object(path)()

    dask_serialize.register_lazy(package, register_all)
    dask_deserialize.register_lazy(package, register_all)


register_package_serializers()


class Sealed:
    """A task's function and arguments pickled once by the driver and opened only
    where the task runs.

    Dask's scheduler unpickles every graph it is given, arguments included, and the
    embedded cluster's scheduler runs on the driver's event-loop thread. A policy
    sent to build a rollout worker was rebuilt there: torch modules made on a thread
    that is not the learner's, whose OpenMP team then made libgomp stop spinning for
    the learner's (more threads than cores), which slowed a two-thread update by half.
    Sealed, the scheduler sees bytes and never imports or builds what the task takes.
    """

    __slots__ = ("blob",)

    def __init__(self, call: tuple) -> None:
        self.blob = dumps(call)

    def open(self) -> tuple:
        """The ``(fn, args, kwargs)`` sealed."""
        return loads(self.blob)
