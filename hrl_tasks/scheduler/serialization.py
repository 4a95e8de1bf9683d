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
