"""The direct route's messages on its two streams (no cluster, real sockets).

On plain TCP a batch is one length-prefixed pickle with its arrays' buffers out
of band; what plain pickle cannot take (a lambda, a function of ``__main__``)
goes by value. On Dask's comm (TLS) a small batch goes as one plain pickle's
bytes inside the message, the rest as Dask's serialized frames. Either way the
reader gets the messages that were written.
"""

import asyncio
import socket

import numpy as np
import pytest
from distributed.protocol import dumps, loads
from distributed.protocol.serialize import Serialized

from hrl_tasks.scheduler import wire


def across_dask(parts: list) -> list:
    """``parts`` written by Dask's protocol and read back, as a Dask comm does."""
    return wire.unpack(loads(dumps(parts)))


def run(key: str, *args) -> tuple:
    return ("run", key, {"name": "inc", "attempt": 1}, 0, args, {})


def local_inc(x):
    return x + 1


async def plain_pair():
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    return await wire.PlainStream.over(left), await wire.PlainStream.over(right)


def test_a_plain_stream_carries_batches_functions_lambdas_and_writeable_arrays():
    weights = np.arange(10_000, dtype=np.float32)

    def closure(x):
        return x * len(weights)

    async def go():
        engine, worker = await plain_pair()
        batches = [
            [run("inc-1", 1), ("cancel", "inc-0")],
            [("fn", 0, closure), ("fn", 1, local_inc), run("apply-1", lambda x: x * 3)],
            [run("step-1", weights), ("done", "x", "OK", {"a": [1, 2]}, 0.1)],
        ]
        for batch in batches:
            await engine.send(batch)
        got = [await worker.receive() for _ in batches]
        engine.abort()
        with pytest.raises(OSError):
            await worker.receive()
        worker.abort()
        return batches, got

    batches, got = asyncio.run(go())
    assert got[0] == batches[0]
    (_, _, sent_closure), (_, _, inc), apply = got[1]
    assert sent_closure(2) == 20_000 and inc(1) == 2 and apply[4][0](2) == 6
    array = got[2][0][4][0]
    np.testing.assert_array_equal(array, weights)
    array[0] = 5.0  # a task may change what it was given, as on Dask's comm
    assert got[2][1] == batches[2][1]


def test_a_batch_that_does_not_pickle_raises_before_a_byte_is_written():
    async def go():
        engine, worker = await plain_pair()
        with pytest.raises(Exception, match="lock"):
            await engine.send([run("bad-1", __import__("threading").Lock())])
        await engine.send([run("inc-1", 1)])
        got = await worker.receive()
        engine.abort()
        worker.abort()
        return got

    assert asyncio.run(go()) == [run("inc-1", 1)]


def test_on_dask_a_small_batch_is_one_plain_pickle_and_reads_back_as_written():
    batch = [run("inc-1", 1), ("cancel", "inc-0"), ("done", "x", "OK", {"a": [1, 2]}, 0.1)]
    parts = wire.pack(batch)
    assert len(parts) == 1 and isinstance(parts[0], bytes)
    assert across_dask(parts) == batch


def test_on_dask_functions_lambdas_arrays_and_large_batches_go_as_dask_frames():
    def closure(x):
        return x + 1

    parts = wire.pack([("fn", 0, closure), run("inc-1", 1)])
    assert isinstance(parts[0], Serialized) and isinstance(parts[1], bytes)
    (_, _, fn), message = across_dask(parts)
    assert fn(1) == 2 and message == run("inc-1", 1)
    parts = wire.pack([run("apply-1", lambda x: x * 3)])
    assert isinstance(parts[0], Serialized) and across_dask(parts)[0][4][0](2) == 6
    weights = np.arange(10_000, dtype=np.float32)
    parts = wire.pack([run("step-1", weights)])
    assert isinstance(parts[0], Serialized)
    np.testing.assert_array_equal(across_dask(parts)[0][4][0], weights)
    text = "x" * (wire.LEAN_MAX_BYTES + 1)
    parts = wire.pack([run("echo-1", text)])
    assert isinstance(parts[0], Serialized) and across_dask(parts)[0][4][0] == text
