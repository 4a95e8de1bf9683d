"""The direct route's messages as they cross Dask's protocol (no cluster).

A small batch goes as one plain pickle's bytes inside the message; functions,
arrays, what plain pickle cannot take (a lambda) and large batches go as Dask's
serialized frames. Either way the reader gets the messages that were written.
"""

import numpy as np
from distributed.protocol import dumps, loads
from distributed.protocol.serialize import Serialized

from hrl_tasks.scheduler.task_service import LEAN_MAX_BYTES, pack, unpack


def across(parts: list) -> list:
    """``parts`` written by Dask's protocol and read back, as the stream does."""
    return unpack(loads(dumps(parts)))


def run(key: str, *args) -> tuple:
    return ("run", key, {"name": "inc", "attempt": 1}, 0, args, {})


def test_a_small_batch_is_one_plain_pickle_and_reads_back_as_written():
    batch = [run("inc-1", 1), ("cancel", "inc-0"), ("done", "x", "OK", {"a": [1, 2]}, 0.1)]
    parts = pack(batch)
    assert len(parts) == 1 and isinstance(parts[0], bytes)
    assert across(parts) == batch


def test_functions_go_in_a_part_of_their_own_by_value():
    def local_inc(x):  # not importable by name: it must travel by value
        return x + 1

    parts = pack([("fn", 0, local_inc), run("inc-1", 1)])
    assert isinstance(parts[0], Serialized) and isinstance(parts[1], bytes)
    (_, _, fn), message = across(parts)
    assert fn(1) == 2 and message == run("inc-1", 1)


def test_what_plain_pickle_cannot_take_goes_by_dask_and_arrives():
    parts = pack([run("apply-1", lambda x: x * 3)])
    assert isinstance(parts[0], Serialized)
    [message] = across(parts)
    assert message[4][0](2) == 6


def test_arrays_and_large_batches_keep_their_buffers_out_of_the_message():
    weights = np.arange(10_000, dtype=np.float32)
    parts = pack([run("step-1", weights)])
    assert isinstance(parts[0], Serialized)
    np.testing.assert_array_equal(across(parts)[0][4][0], weights)
    text = "x" * (LEAN_MAX_BYTES + 1)
    parts = pack([run("echo-1", text)])
    assert isinstance(parts[0], Serialized)
    assert across(parts)[0][4][0] == text
