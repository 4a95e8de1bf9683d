"""Functions and classes the engine tests run on workers (importable by reference)."""

import os
import time

from distributed import get_worker

import hrl_tasks as hrl


def inc(x):
    return x + 1


def add(a, b):
    return a + b


def total(values):
    return sum(values)


def sleep_then(value, seconds):
    time.sleep(seconds)
    return value


def fail(message):
    raise ValueError(message)


def where_am_i():
    from distributed import get_worker

    return get_worker().address


def pid_and_address():
    from distributed import get_worker

    return os.getpid(), get_worker().address


def flaky(succeed_on_attempt):
    attempt = hrl.task_context().attempt
    if attempt < succeed_on_attempt:
        raise ConnectionError(f"attempt {attempt} fails")
    return attempt


def tree(depth, fan_out, resources=None):
    """A nested fan-out: every inner node waits on its children; returns the leaf count."""
    if depth == 0:
        return 1
    engine = hrl.current_engine()
    children = [
        engine.submit(tree, depth - 1, fan_out, resources, resources=resources)
        for _ in range(fan_out)
    ]
    return sum(engine.gather(children))


class Counter:
    """A stateful worker that snapshots its state."""

    def __init__(self, start=0):
        self.n = start

    def add(self, k=1):
        self.n += k
        return self.n

    def slow_add(self, k, seconds):
        time.sleep(seconds)
        self.n += k
        return self.n

    def value(self):
        return self.n

    def get_state(self):
        return {"n": self.n}

    def restore_state(self, state):
        self.n = state["n"]


class Box:
    """A stateful worker without snapshots."""

    def __init__(self):
        self.item = None

    def put(self, item):
        self.item = item
        return True

    def get(self):
        return self.item


class Broken:
    def __init__(self):
        raise RuntimeError("factory exploded")


def work(i, seconds):
    """A task of known length whose result depends only on its input."""
    time.sleep(seconds)
    return i * i


class Sampler:
    """A stand-in for a rollout worker: equivalent peers, each says who answered."""

    def __init__(self):
        from distributed import get_worker

        self.tag = get_worker().address

    def sample(self, seconds):
        time.sleep(seconds)
        return self.tag


def local_table(key):
    """(process id, identity of the worker_local object ``key`` in that process)."""
    table = hrl.worker_local(key, lambda: {"rows": list(range(1000))})
    return os.getpid(), id(table)


class ThreadLog:
    """A stateful worker that records which thread ran each call, and when."""

    def record(self, i, seconds=0.0):
        import threading

        started = time.monotonic()
        time.sleep(seconds)
        return i, threading.get_ident(), started


class Nester:
    """A stateful worker whose calls use the engine and worker_local from the worker."""

    def nested_inc(self, x):
        return hrl.current_engine().submit(inc, x).result()

    def where(self):
        from distributed import get_worker

        return get_worker().address

    def table(self):
        return os.getpid(), id(hrl.worker_local("nester", dict))


def nested_engine_hears_worker_events():
    """Whether this worker's engine gets the scheduler's worker events (not only sweeps)."""
    from distributed import get_client

    from hrl_tasks.scheduler import dask_compat, worker_events

    engine = hrl.current_engine()
    handler = dask_compat.topic_handler(get_client(), worker_events.TOPIC)
    return handler == engine.backend.on_cluster_event


def default_spans(dask_scheduler):
    """The scheduler's default spans (ids) and its other spans (names), once the
    engine's scheduler plugin has let it forget old ones; and how many it forgot so far."""
    from hrl_tasks.scheduler import worker_events

    spans = dask_scheduler.extensions["spans"]
    plugin = dask_scheduler.plugins[worker_events.NAME]
    plugin.forget_old_spans()
    defaults = [s.id for s in spans.spans_search_by_name.get(("default",), [])]
    named = [s.name for s in spans.spans.values() if s.name != ("default",)]
    return defaults, named, plugin.spans_forgotten


def objects_made_and_awaited_in_a_task(n, resources=None):
    """Create ``n`` stateful workers from inside a task and wait until each is built;
    returns their addresses and this task's own worker's."""
    engine = hrl.current_engine()
    handles = [engine.create_worker(Counter, resources=resources) for _ in range(n)]
    for handle in handles:
        handle.ready(timeout=20)
    addresses = [handle.address for handle in handles]
    for handle in handles:
        handle.kill(timeout=20)
    return addresses, get_worker().address


def hold_an_object_until(event_name, resources):
    """Create a stateful worker holding ``resources``, say where (Dask Event
    ``event_name + '-made'``), and keep it until ``event_name`` is set."""
    from distributed import Event

    engine = hrl.current_engine()
    handle = engine.create_worker(Counter, resources=resources)
    handle.ready(timeout=20)
    Event(event_name + "-made").set()
    Event(event_name).wait(timeout=60)
    address = handle.address
    handle.kill(timeout=20)
    return address


def zeros(n):
    """A result of ``8 n`` bytes."""
    import numpy as np

    return np.zeros(n)


def length(array):
    return len(array)


def overlap_probe(seconds):
    """Sleep holding the task's slot; returns the most probes this worker process ran at once."""
    import threading

    probe = hrl.worker_local(
        "overlap-probe", lambda: {"lock": threading.Lock(), "now": 0, "most": 0}
    )
    with probe["lock"]:
        probe["now"] += 1
        probe["most"] = max(probe["most"], probe["now"])
    time.sleep(seconds)
    with probe["lock"]:
        probe["now"] -= 1
        return probe["most"]


def a_lock():
    """A result that does not pickle."""
    import threading

    return threading.Lock()


def worker_client_id():
    """The id of the worker's own client (a task that submits tasks makes one)."""
    from distributed import get_client

    return get_client().id


class Unpickled:
    """Writes the process that unpickles it into ``path``, one pid a line."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return unpickled_in, (self.path,)


def unpickled_in(path) -> Unpickled:
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")
    return Unpickled(path)


def pid_of(_item) -> int:
    return os.getpid()


class Holds:
    """A stateful worker made with an argument."""

    def __init__(self, item):
        self.item = item

    def keep(self, item) -> int:
        self.item = item
        return os.getpid()
