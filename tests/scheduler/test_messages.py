"""Reading Dask messages adds nothing to CPython's table of interned strings.

msgpack interns every map key it reads; a header key that is not an identifier
is held by nothing else, so each message would add it and leave a dead slot,
and the table's rebuild once the dead slots fill it grew every process by 2 MB
about 10 minutes into a search (docs/benchmarks.md, the search soak). The
engine keeps those keys interned for the life of the process.
"""

import os

import msgpack
import numpy as np
from distributed.protocol import dumps, to_serialize
from distributed.protocol.serialize import ToPickle

import hrl_tasks as hrl
from hrl_tasks.scheduler import dask_compat
from tests.scheduler import tasks


class Plain:
    """Sent by pickle (no Dask serializer of its own)."""


def map_keys(value, found: list) -> list:
    """Every string map key in ``value``, the objects themselves, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                found.append(key)
            map_keys(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            map_keys(item, found)
    return found


def read_keys(message: dict) -> list:
    """The map keys a reader's msgpack makes of ``message``'s header frames."""
    frames = dumps(message)
    found = []
    for frame in frames:
        try:
            decoded = msgpack.loads(frame, strict_map_key=False)
        except Exception:  # noqa: BLE001 - a data frame, not a header
            continue
        map_keys(decoded, found)
    return found


MESSAGES = [
    {"op": "compute", "array": to_serialize(np.arange(6.0).reshape(2, 3))},
    {"op": "compute", "object": to_serialize(Plain()), "both": to_serialize([np.ones(2), Plain()])},
    {"op": "result", "value": ToPickle(Plain())},
    {"status": "OK", "time": 1.0, "heartbeat-interval": 0.5},  # the scheduler's heartbeat reply
]


def test_every_header_key_that_is_not_a_name_is_one_the_engine_keeps_interned():
    dask_compat.pin_header_keys()
    seen = {key for message in MESSAGES for key in read_keys(message) if not key.isidentifier()}
    assert {"num-sub-frames", "sub-header", "pickled-obj", "heartbeat-interval"} <= seen
    assert seen <= set(dask_compat.HEADER_KEYS), f"not kept: {seen - set(dask_compat.HEADER_KEYS)}"


def test_a_read_header_key_is_the_kept_string_itself_not_a_new_table_entry():
    kept = {key: key for key in dask_compat.pin_header_keys()}
    for message in MESSAGES:
        for key in read_keys(message):
            if key in kept:
                assert key is kept[key], f"{key!r} was added to the table again"


def test_no_argument_is_unpickled_in_the_driver_whose_process_holds_the_scheduler(tmp_path):
    """The embedded cluster's scheduler runs on the driver's event loop and unpickles
    the graphs it is given: a policy sent to build a rollout worker was built there,
    torch on a second thread of the learner's process (docs/learning.md, TD3)."""
    path = tmp_path / "pids"
    with hrl.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        ran_in = {engine.submit(tasks.pid_of, tasks.Unpickled(str(path)), route=route).result()
                  for route in ("dask", "direct")}  # fmt: skip
        holder = engine.create_worker(tasks.Holds, tasks.Unpickled(str(path)))
        ran_in |= {holder.call("keep", tasks.Unpickled(str(path)), direct=direct).result()
                   for direct in (False, True)}  # fmt: skip
        opened = [int(pid) for pid in path.read_text().split()]
    assert os.getpid() not in opened, "the driver's process unpickled a task's argument"
    assert len(opened) == 5 and set(opened) == ran_in  # the worker's process, every time
