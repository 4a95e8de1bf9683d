"""The direct route's streams: batches of messages between an engine and a worker.

A stream starts as a Dask comm (Dask's handshake, its security, its handler on
the worker). On plain TCP both ends then take the socket over: a batch is one
pickle, length-prefixed, with its arrays' buffers out of band
(:class:`PlainStream`). Dask's comm around the same bytes walked every message
for its size, ran its serializer families and meters, and went through
Tornado's stream on each read and write; on a no-op task those cost more than
anything else on its way (docs/engine.md). On other transports (TLS) the
stream stays Dask's comm (:class:`DaskStream`).

Both have ``send(messages)``, ``receive() -> messages`` and ``abort()``.
``send`` raises before any byte is written when a message does not pickle;
both raise ``OSError`` once the stream is broken.

The plain format: ``!I`` frame count, ``!Q`` per frame its length, the frames.
Frame 0 pickles the batch (protocol 5), the others are its buffers.
"""

from __future__ import annotations

import asyncio
import pickle
import struct

import cloudpickle

from hrl_tasks.scheduler import dask_compat

TASKS_HANDLER = "hrl_tasks_tasks"  # the worker's handler that takes an engine's stream
MAX_BATCH = 1000  # messages per write: the first of a long burst leaves without waiting for all
LEAN_MAX_BYTES = 64_000  # Dask's comm: a batch pickled this small goes inside the message


def plain(messages: list) -> tuple | None:
    """``messages`` pickled plainly, ``(payload, buffers)``; None when they must go by
    value (plain pickle refuses them, e.g. a lambda, or they name ``__main__``)."""
    buffers: list = []
    try:
        payload = pickle.dumps(messages, protocol=5, buffer_callback=buffers.append)
    except Exception:
        return None
    return None if b"__main__" in payload else (payload, buffers)


def dumps(messages: list) -> list:
    """``messages`` as frames: plain pickle when it can (fast), else by value as Dask
    does (functions and classes of ``__main__``, lambdas, closures), and always by
    value for a batch that carries functions (``("fn", ...)``)."""
    found = None if any(m[0] == "fn" for m in messages) else plain(messages)
    if found is None:
        buffers: list = []
        found = cloudpickle.dumps(messages, protocol=5, buffer_callback=buffers.append), buffers
    payload, buffers = found
    return [payload, *(b.raw() for b in buffers)]


def loads(frames: list) -> list:
    return pickle.loads(frames[0], buffers=frames[1:])


class PlainStream:
    """Messages on a plain TCP socket taken over from a Dask comm."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def over(cls, sock) -> PlainStream:
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(reader, writer)

    async def send(self, messages: list) -> None:
        frames = dumps(messages)
        sizes = [memoryview(f).nbytes for f in frames]
        self.writer.writelines([struct.pack(f"!I{len(frames)}Q", len(frames), *sizes), *frames])
        await self.writer.drain()

    async def receive(self) -> list:
        read = self.reader.readexactly
        try:
            (count,) = struct.unpack("!I", await read(4))
            sizes = struct.unpack(f"!{count}Q", await read(8 * count))
            frames = [await read(sizes[0])]
            frames += [bytearray(await read(size)) for size in sizes[1:]]  # writeable arrays
        except asyncio.IncompleteReadError as exc:
            raise ConnectionResetError("the task stream closed") from exc
        return loads(frames)

    def abort(self) -> None:
        self.writer.transport.abort()


class DaskStream:
    """Messages on a Dask comm (any transport: TLS too)."""

    def __init__(self, comm):
        self.comm = comm

    async def send(self, messages: list) -> None:
        await self.comm.write(pack(messages))

    async def receive(self) -> list:
        return unpack(await self.comm.read())

    def abort(self) -> None:
        self.comm.abort()


async def opened(comm, plain: bool):
    """The stream over ``comm``: plain if ``plain`` (both ends agreed) and the comm is
    plain TCP, else ``comm`` itself. The end that takes the socket reads nothing more
    through the comm: the other end writes nothing until both have taken it."""
    sock = dask_compat.plain_socket(comm) if plain else None
    return DaskStream(comm) if sock is None else await PlainStream.over(sock)


def pack(messages: list) -> list:
    """One Dask write's parts: the functions in a pickle of their own (by value when
    they must be, e.g. defined in ``__main__``), the rest in one pickle (one message
    with many tasks costs about what one task did alone). A small batch that pickles
    plainly goes as bytes inside the message (:func:`lean`)."""
    fns = [m for m in messages if m[0] == "fn"]
    rest = [m for m in messages if m[0] != "fn"]
    return ([pickled(fns)] if fns else []) + ([lean(rest)] if rest else [])


def lean(messages: list):
    """``messages`` as one plain pickle's bytes, when that is small and has no buffers
    out of band (see :func:`plain`); else :func:`pickled` (bytes cost Dask's
    protocol almost nothing: no size walk, no serializer families)."""
    found = plain(messages)
    if found is None or found[1] or len(found[0]) > LEAN_MAX_BYTES:
        return pickled(messages)
    return found[0]


def pickled(obj):
    """``obj`` serialized now (arrays' buffers out of band), raising if it does not
    pickle: ``to_serialize`` would send an error that the reader raises instead."""
    from distributed.protocol.serialize import Serialized, serialize

    header, frames = serialize(obj, serializers=("pickle",), on_error="raise")
    return Serialized(header, frames)


def unpack(parts) -> list:
    """The messages of one Dask read: :func:`pack`'s parts, each bytes (a plain
    pickle) or the list Dask's protocol made of a :func:`pickled` one."""
    return [
        message
        for part in parts
        for message in (pickle.loads(part) if isinstance(part, bytes) else part)
    ]


def answered_value(response: dict):
    """The value in a worker's answer to a request for a kept result: sent through
    Dask's serialization, or as one pickle's bytes (`TaskService.result`)."""
    if "pickled" in response:
        return pickle.loads(response["pickled"])
    return response["value"]


def picklable(messages: list) -> tuple[list, list]:
    """Split ``messages`` into those that pickle and those that do not (with why)."""
    from distributed.protocol.pickle import dumps

    good, bad = [], []
    for message in messages:
        try:
            dumps(message)
            good.append(message)
        except Exception as exc:
            bad.append((message, exc))
    return good, bad


async def write_batches(stream, outbox: list, wake: asyncio.Event, unpicklable) -> None:
    """Write what ``outbox`` holds as it comes, in batches; a batch that does not
    pickle is written without the messages that do not (``unpicklable(message, error)``
    says what became of each); nothing was written of the failed batch."""
    while True:
        await wake.wait()
        wake.clear()
        while outbox:
            batch = outbox[:MAX_BATCH]
            del outbox[:MAX_BATCH]
            try:
                await stream.send(batch)
            except OSError:
                raise
            except Exception:  # serialization: found before any byte is written
                batch, bad = picklable(batch)
                for message, exc in bad:
                    unpicklable(message, exc)
                await stream.send(batch)
