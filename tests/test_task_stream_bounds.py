"""The worker's half of the direct route stays bounded: functions, kept results,
cancelled keys and waiting parents. Read from the worker processes themselves."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import settings
from hrl_tasks.scheduler.task_channel import FUNCTIONS_KEPT, FunctionCache
from hrl_tasks.scheduler.task_service import may_wait

# --- pure decisions ----------------------------------------------------------------


def test_fresh_equal_lambdas_share_one_entry_and_distinct_ones_stay_within_the_limit():
    cache, ids = FunctionCache(limit=8), iter(range(10**6))
    first = None
    for _ in range(100_000):
        fn = lambda x: x + 1  # noqa: E731 - a new object each time, the same content
        fn_id = cache.of(fn)
        if fn_id is None:
            fn_id, forgotten = cache.add(fn, next(ids))
            cache.sent.add(fn_id)
            assert forgotten == []
        first = fn_id if first is None else first
        assert fn_id == first
    assert len(cache) == 1 and len(cache.by_object) <= 8

    forgotten_all = []
    for i in range(1000):
        fn = lambda x, i=i: x + i  # noqa: E731 - each one different
        fn_id, forgotten = cache.add(fn, next(ids))
        cache.sent.add(fn_id)
        forgotten_all += forgotten
        assert len(cache) <= 8 and len(cache.by_object) <= 8
    assert len(forgotten_all) == 1000 + 1 - 8  # the first lambda's entry went too
    assert cache.sent == set(cache.by_content.values())


def test_the_same_object_is_found_without_pickling_and_a_reused_id_is_not_confused():
    cache = FunctionCache(limit=4)

    def f(x):
        return x

    fn_id, _ = cache.add(f, 7)
    assert cache.of(f) == 7 and fn_id == 7
    assert cache.of(lambda x: x) is None  # another object: found by content only once added


@pytest.mark.parametrize("waiting, slots, threads, allowed", [
    (0, 1, 8, True), (6, 1, 8, True), (7, 1, 8, False), (1021, 2, 1024, True),
    (1022, 2, 1024, False),
])  # fmt: skip
def test_a_wait_is_refused_when_it_would_leave_no_thread_for_the_tasks_waited_for(
    waiting, slots, threads, allowed
):
    assert may_wait(waiting, slots, threads) is allowed


# --- on a cluster of worker processes ---------------------------------------------------


def stream_state(dask_worker):
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    service = WorkerRuntime.of(dask_worker).task_service
    if service is None:
        return {"kept": 0, "functions": [], "cancelled": [], "waiting": 0}
    return {
        "kept": len(service.kept),
        "functions": [len(stream.state.functions) for stream in service.streams],
        "cancelled": [len(stream.state.cancelled) for stream in service.streams],
        "active": [len(stream.state.active) for stream in service.streams],
        "waiting": service.waiting,
    }


def add_to(i):
    return lambda x: x + i


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_a_function_made_per_call_is_kept_within_the_limit_on_both_ends():
    with hrl.Engine.local(n_workers=1, threads_per_worker=1, route="direct") as engine:
        n = FUNCTIONS_KEPT + 500
        assert engine.gather([engine.submit(add_to(i), 1) for i in range(n)]) == [
            i + 1 for i in range(n)
        ]
        same = [engine.submit(lambda x: 2 * x, i) for i in range(2000)]  # noqa: E731
        assert engine.gather(same) == [2 * i for i in range(2000)]
        (state,) = engine.client.run(stream_state).values()
        assert state["functions"] and max(state["functions"]) <= FUNCTIONS_KEPT
        for channel in engine.backend.streams.channels.values():
            assert len(channel.functions) <= FUNCTIONS_KEPT
            assert len(channel.functions.by_object) <= FUNCTIONS_KEPT


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_cancelled_keys_are_kept_only_while_their_task_runs():
    with hrl.Engine.local(n_workers=1, threads_per_worker=1, route="direct") as engine:
        running = [engine.submit(sleep_then, 0.3, i) for i in range(3)]
        time.sleep(0.1)
        for ref in running:
            ref.cancel()
        done = engine.submit(sleep_then, 0.0, "after")
        assert done.result(timeout=30) == "after"
        # A cancel that crosses the answer: the task has ended and its answer left.
        (channel,) = engine.backend.streams.channels.values()
        engine.backend.on_loop(channel._send, ("cancel", done.key))
        engine.submit(sleep_then, 0.0, 1).result(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            (state,) = engine.client.run(stream_state).values()
            if state["cancelled"] == [0] and state["active"] == [0]:
                break
            time.sleep(0.1)
        assert state["cancelled"] == [0] and state["active"] == [0], state


def parent_waiting_until(path):
    """A task that waits as a parent waits for its children (lending its slot) until
    ``path`` exists."""
    from hrl_tasks.scheduler.context import task_wait

    with task_wait():
        while not os.path.exists(path):
            time.sleep(0.02)
    return 1


def fewer_threads(dask_worker, threads):
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    WorkerRuntime.of(dask_worker).task_service.threads = threads


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_parents_that_would_take_every_thread_fail_clearly_instead_of_hanging(tmp_path):
    # The worker's pool has 1,024 threads; here the service counts 8, so that 7 waiting
    # parents and a running task fill it: the 8th parent's wait fails at once, and so
    # do the next ones; the 7 go on once they may.
    go = tmp_path / "go"
    with hrl.Engine.local(n_workers=1, threads_per_worker=1, route="direct") as engine:
        engine.submit(sleep_then, 0.0, 0).result(timeout=30)  # the worker's service is up
        engine.client.run(fewer_threads, threads=8)
        parents = [engine.submit(parent_waiting_until, str(go)) for _ in range(10)]
        engine.wait(parents[7:], timeout=60)
        for ref in parents[7:]:
            with pytest.raises(Exception, match="7 tasks already wait for other tasks on"):
                ref.result(timeout=0)
        (state,) = engine.client.run(stream_state).values()
        assert state["waiting"] == 7 and not any(ref.done() for ref in parents[:7]), state
        go.touch()
        assert engine.gather(parents[:7]) == [1] * 7
        (state,) = engine.client.run(stream_state).values()
        assert state["waiting"] == 0


DRIVER = """
import sys, time, numpy as np, hrl_tasks as hrl
engine = hrl.Engine.connect(sys.argv[1], route="direct")
refs = [engine.submit(np.zeros, {n}) for _ in range(4)]
engine.wait(refs)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_results_kept_for_a_driver_that_crashed_are_let_go_after_the_grace():
    from distributed import Client, LocalCluster

    n = settings.value("keep-from")  # float64: 8x the threshold, kept on its worker
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip

        def short_grace(dask_worker):
            from hrl_tasks.scheduler import task_service
            from hrl_tasks.scheduler.runtime import WorkerRuntime

            task_service.install(WorkerRuntime.of(dask_worker)).kept_grace_s = 1.0

        client.run(short_grace)
        driver = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(DRIVER.format(n=n)), cluster.scheduler_address],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            assert driver.stdout.readline().strip() == "ready"
            (state,) = client.run(stream_state).values()
            assert state["kept"] == 4, state
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and state["kept"]:
                time.sleep(0.2)
                (state,) = client.run(stream_state).values()
            assert state["kept"] == 0, state
        finally:
            driver.kill()
            driver.wait(timeout=30)
