"""A msgpack codec for experience data, and how batches travel between processes.

`encode` turns nested dicts, lists, tuples, scalars, strings, bytes, numpy
arrays and scalars, `SampleBatch` and `MultiAgentBatch` into bytes; `decode`
reverses it. Format: a fixed 6-byte marker (itself a msgpack ext object, so a
foreign byte string is rejected up front) followed by one msgpack object.

Numpy data travels in ext types whose payload is::

    u32 header length | msgpack header [meta, [[dtype.str, shape], ...]] | arrays

with each array's raw C-order bytes starting at a 16-byte-aligned offset.
Decoded arrays are `np.frombuffer` views of the ext payload: no copy beyond
msgpack's own, and read-only (call ``.copy()`` or `SampleBatch.copy` to write).
Tuples are preserved (ext type), including as dict keys. Only numeric, bool,
datetime and fixed-width string dtypes are supported; object and structured
arrays raise TypeError. A single ext payload is limited to 4 GiB by msgpack.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack
import numpy as np

from hrl_tasks.data.sample_batch import MultiAgentBatch, SampleBatch, decoded_batch

_EXT_NDARRAY = 1
_EXT_NUMPY_SCALAR = 2
_EXT_TUPLE = 3
_EXT_SAMPLE_BATCH = 4
_EXT_MULTI_AGENT_BATCH = 5
_EXT_MARKER = 127
_MARKER = msgpack.ExtType(_EXT_MARKER, b"hrl1")
_MAGIC = b"\xd6\x7fhrl1"  # msgpack.packb(_MARKER): fixext4, code 127, "hrl1"
_ALIGN = 16
_U32 = struct.Struct("<I")
_DTYPE_KINDS = "biufcmMSU"


class DecodeError(ValueError):
    """Raised when bytes are not a valid, complete `encode` output."""


def encode(obj: Any) -> bytes:
    """Serializes `obj` to bytes.

    Args:
        obj: None, bool, int, float, str, bytes, numpy arrays and scalars,
            SampleBatch, MultiAgentBatch, or dicts/lists/tuples of these.

    Returns:
        The encoded bytes.

    Raises:
        TypeError: For unsupported types, including object-dtype arrays.
    """
    packer = _packer()
    packer.pack(_MARKER)
    packer.pack(obj)
    return packer.bytes()


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Deserializes bytes produced by `encode`.

    Args:
        data: The encoded bytes.

    Returns:
        The decoded object; numpy arrays in it are read-only views.

    Raises:
        DecodeError: If `data` is truncated, corrupt, or not from `encode`.
    """
    view = memoryview(data).cast("B")
    if bytes(view[: len(_MAGIC)]) != _MAGIC:
        raise DecodeError(
            f"not hrl_tasks codec data: expected marker {_MAGIC!r}, got {bytes(view[:6])!r}"
        )
    return _unpackb(view[len(_MAGIC) :])


def register_dask_serialization() -> None:
    """Registers SampleBatch and MultiAgentBatch with the engine's serialization, so that
    batches travel a frame per column instead of pickled. Safe to call more than once.

    Importing `hrl_tasks.data` calls it when ``distributed`` is loaded already, which
    covers worker processes that unpickle the batch class; in a process that imports
    `hrl_tasks.data` first, the engine calls it (``hrl_tasks.registry.SERIALIZER_PATHS``).
    """
    from hrl_tasks.scheduler.serialization import register_serializer

    for cls in (SampleBatch, MultiAgentBatch):
        register_serializer(cls, _dask_dumps, _dask_loads)


def _dask_dumps(obj: SampleBatch | MultiAgentBatch) -> tuple[dict, list[memoryview]]:
    """A header naming the columns, and each column as a frame of its own, sent from
    the array's memory: no copy on the way out (Dask writes the frames as they are)."""
    kind = "batch" if isinstance(obj, SampleBatch) else "multi"
    meta, names, arrays = _columns_of(obj)
    arrays = [_sendable(array, name) for array, name in zip(arrays, names, strict=True)]
    specs = [[a.dtype.str, list(a.shape)] for a in arrays]
    # The layout's policy ids may be numpy scalars or tuples: packed by the codec, as
    # bytes, since Dask's own header packing knows neither.
    header = {"hrl_tasks": [kind, _packb(meta), names if kind == "batch" else None, specs]}
    return header, [memoryview(a.reshape(-1).view(np.uint8)) for a in arrays]


def _dask_loads(header: dict, frames: Sequence[bytes | memoryview]) -> Any:
    """Columns read in place from the frames Dask received (writable when the frames
    are), copied only when a frame is misaligned for its dtype."""
    if "hrl_tasks" not in header:  # one encoded frame, as batches travelled before
        return decode(frames[0] if len(frames) == 1 else b"".join(frames))
    kind, packed_meta, names, specs = header["hrl_tasks"]
    meta = _unpackb(packed_meta)
    if len(specs) != len(frames):
        raise DecodeError(f"{len(specs)} column specs for {len(frames)} frames")
    arrays = []
    for (dtype_str, shape), frame in zip(specs, frames, strict=True):
        dtype = _checked_dtype(dtype_str)
        count = math.prod(shape)
        if memoryview(frame).nbytes != count * dtype.itemsize:
            raise DecodeError(
                f"a {dtype_str} column of shape {shape} in a frame of "
                f"{memoryview(frame).nbytes} bytes"
            )
        array = np.frombuffer(frame, dtype, count).reshape(shape)
        arrays.append(array if array.flags.aligned else array.copy())
    if kind == "batch":
        return decoded_batch(_zip_columns(names, arrays))
    return _multi_agent_batch(*meta, arrays)


def _columns_of(batch: SampleBatch | MultiAgentBatch) -> tuple[Any, list[str], list[np.ndarray]]:
    """``(meta, names, arrays)`` of a batch's columns: ``meta`` is None for a
    SampleBatch, ``[env_steps, [[policy_id, column names], ...]]`` for a
    MultiAgentBatch, whose names are ``"policy_id/column"``."""
    if isinstance(batch, SampleBatch):
        return None, list(batch.columns), list(batch.values())
    layout = [[pid, list(b.columns)] for pid, b in batch.items()]
    names = [f"{pid!r}/{name}" for pid, b in batch.items() for name in b.columns]
    arrays = [a for b in batch.values() for a in b.values()]
    return [batch.env_steps(), layout], names, arrays


def _sendable(array: np.ndarray, name: str | None) -> np.ndarray:
    """``array`` if it can travel as it is (C-contiguous), else a contiguous copy.

    Raises:
        TypeError: for dtypes the codec does not carry (objects, structured).
    """
    if array.dtype.kind not in _DTYPE_KINDS or array.dtype.fields is not None:
        where = f" (column {name})" if name else ""
        raise TypeError(
            f"cannot encode an array of dtype {array.dtype}{where}; "
            "only bool, numeric, datetime and fixed-width string arrays are supported"
        )
    return array if array.flags.c_contiguous else array.copy(order="C")


# Encoding ------------------------------------------------------------------------


def _packer() -> msgpack.Packer:
    # strict_types so that tuples and np.float64 (a float subclass) reach _default.
    return msgpack.Packer(default=_default, strict_types=True, use_bin_type=True, autoreset=False)


def _packb(obj: Any) -> bytes:
    packer = _packer()
    packer.pack(obj)
    return packer.bytes()


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(_EXT_NDARRAY, _pack_arrays(None, [obj]))
    if isinstance(obj, np.generic):
        return msgpack.ExtType(_EXT_NUMPY_SCALAR, _pack_arrays(None, [np.asarray(obj)]))
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, _packb(list(obj)))
    if isinstance(obj, SampleBatch):
        _, names, arrays = _columns_of(obj)
        return msgpack.ExtType(_EXT_SAMPLE_BATCH, _pack_arrays(names, arrays, names))
    if isinstance(obj, MultiAgentBatch):
        meta, names, arrays = _columns_of(obj)
        return msgpack.ExtType(_EXT_MULTI_AGENT_BATCH, _pack_arrays(meta, arrays, names))
    for base in (int, float, str, bytes, list, dict):  # subclasses, e.g. IntEnum
        if isinstance(obj, base):
            return base.__str__(obj) if base is str else base(obj)
    raise TypeError(
        f"hrl_tasks codec cannot encode {type(obj).__qualname__}; convert it to numpy "
        "arrays, numbers, strings, bytes, or dicts/lists/tuples of these"
    )


def _pack_arrays(meta: Any, arrays: Iterable[np.ndarray], names: list[str] | None = None) -> bytes:
    contiguous = [_sendable(a, names[i] if names else None) for i, a in enumerate(arrays)]
    header = _packb([meta, [[a.dtype.str, list(a.shape)] for a in contiguous]])
    parts = [_U32.pack(len(header)), header]
    offset = _U32.size + len(header)
    for array in contiguous:
        pad = -offset % _ALIGN
        parts += [bytes(pad), array.reshape(-1).view(np.uint8)]
        offset += pad + array.nbytes
    return b"".join(parts)


# Decoding ------------------------------------------------------------------------


def _unpackb(data: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False, use_list=True)
    except DecodeError:
        raise
    except Exception as err:  # msgpack and numpy raise many types on foreign input
        raise DecodeError(f"corrupt or truncated hrl_tasks codec data: {err}") from err


def _ext_hook(code: int, payload: bytes) -> Any:
    if code == _EXT_NDARRAY:
        return _single_array(payload)
    if code == _EXT_NUMPY_SCALAR:
        array = _single_array(payload)
        if array.ndim != 0:
            raise DecodeError(f"numpy scalar payload has shape {array.shape}")
        return array[()]
    if code == _EXT_TUPLE:
        return tuple(_unpackb(payload))
    if code == _EXT_SAMPLE_BATCH:
        names, arrays = _unpack_arrays(payload)
        return decoded_batch(_zip_columns(names, arrays))
    if code == _EXT_MULTI_AGENT_BATCH:
        (env_steps, layout), arrays = _unpack_arrays(payload)
        return _multi_agent_batch(env_steps, layout, arrays)
    raise DecodeError(f"unknown msgpack ext type code {code}")


def _multi_agent_batch(env_steps: int, layout: list, arrays: list[np.ndarray]) -> MultiAgentBatch:
    """A MultiAgentBatch from its layout (``[[policy_id, column names], ...]``) and the
    arrays of all its columns in that order."""
    batches, start = {}, 0
    for pid, names in layout:
        batches[pid] = decoded_batch(_zip_columns(names, arrays[start : start + len(names)]))
        start += len(names)
    if start != len(arrays):
        raise DecodeError(f"MultiAgentBatch layout names {start} of {len(arrays)} arrays")
    return MultiAgentBatch(batches, env_steps)


def _single_array(payload: bytes) -> np.ndarray:
    _, arrays = _unpack_arrays(payload)
    if len(arrays) != 1:
        raise DecodeError(f"array payload holds {len(arrays)} arrays, expected 1")
    return arrays[0]


def _zip_columns(names: list, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    if len(names) != len(arrays):
        raise DecodeError(f"{len(names)} column names for {len(arrays)} arrays")
    return dict(zip(names, arrays, strict=True))


def _unpack_arrays(payload: bytes) -> tuple[Any, list[np.ndarray]]:
    if len(payload) < _U32.size:
        raise DecodeError("array payload shorter than its header length field")
    (header_len,) = _U32.unpack_from(payload)
    offset = _U32.size + header_len
    if offset > len(payload):
        raise DecodeError(f"array header length {header_len} exceeds payload size {len(payload)}")
    meta, specs = _unpackb(memoryview(payload)[_U32.size : offset])
    arrays = []
    for dtype_str, shape in specs:
        dtype = _checked_dtype(dtype_str)
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise DecodeError(f"invalid array shape {shape!r}")
        count = math.prod(shape)
        offset += -offset % _ALIGN
        end = offset + count * dtype.itemsize
        if end > len(payload):
            raise DecodeError(f"array data ends at byte {end}, payload has {len(payload)}")
        arrays.append(np.frombuffer(payload, dtype, count, offset).reshape(tuple(shape)))
        offset = end
    if offset != len(payload):
        raise DecodeError(f"{len(payload) - offset} unexpected bytes after array data")
    return meta, arrays


def _checked_dtype(dtype_str: Any) -> np.dtype:
    if not isinstance(dtype_str, str):
        raise DecodeError(f"dtype must be a string, got {dtype_str!r}")
    return _known_dtype(dtype_str)


@functools.lru_cache(maxsize=256)
def _known_dtype(dtype_str: str) -> np.dtype:
    """A dtype string checked once (a batch has a dozen columns of a few dtypes)."""
    try:
        dtype = np.dtype(dtype_str)
    except TypeError as err:
        raise DecodeError(f"unknown dtype {dtype_str!r}") from err
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.hasobject:
        raise DecodeError(f"refusing to decode an array of dtype {dtype_str!r}")
    return dtype


if "distributed.protocol.serialize" in sys.modules:
    # A worker that unpickles the batch class imports this module after distributed.
    register_dask_serialization()
