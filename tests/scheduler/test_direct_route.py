"""Plain tasks on the direct route: placed by the engine, sent on its own streams."""

import gc
import os
import signal
import threading
import time

import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import clear_faults, inject_faults, settings, wire
from tests.scheduler import tasks
from tests.scheduler.conformance import EngineConformance

KEEP_FROM_BYTES = settings.value("keep-from")  # results this large stay on their worker

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def direct():
    with hrl.Engine.local(n_workers=2, threads_per_worker=1, route="direct") as engine:
        yield engine


@pytest.fixture
def fresh():
    """Its own cluster: the test kills a worker process."""
    with hrl.Engine.local(n_workers=2, threads_per_worker=1, route="direct") as engine:
        yield engine


def scheduler_keys(engine) -> set:
    return set(engine.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks)))


def kept_on_workers(engine) -> dict:
    def kept(dask_worker):
        from hrl_tasks.scheduler.runtime import WorkerRuntime

        return len(WorkerRuntime.of(dask_worker).task_service.kept)

    return engine.client.run(kept)


def test_tasks_skip_the_scheduler_and_come_back_in_order(direct):
    refs = direct.map(tasks.inc, range(300))
    assert direct.gather(refs, timeout=60) == list(range(1, 301))
    assert not {ref.key for ref in refs} & scheduler_keys(direct)
    by_name = direct.stats()["by_name"]["inc"]
    assert by_name["count"] >= 300  # each attempt's time came with its answer
    streams = [channel.stream for channel in direct.backend.streams.channels.values()]
    assert streams and all(isinstance(s, wire.PlainStream) for s in streams)  # TCP, taken over


def test_a_small_result_is_an_input_and_so_is_a_large_one_kept_on_its_worker(direct):
    small = direct.submit(tasks.inc, 1)
    assert direct.submit(tasks.add, small, 10).result(timeout=30) == 12
    big = direct.submit(tasks.zeros, KEEP_FROM_BYTES // 8 + 1)
    assert direct.submit(tasks.length, big).result(timeout=30) == KEEP_FROM_BYTES // 8 + 1
    assert sum(kept_on_workers(direct).values()) == 1
    assert len(big.result(timeout=30)) == KEEP_FROM_BYTES // 8 + 1  # fetched from its worker
    del big
    gc.collect()
    deadline = time.monotonic() + 10  # the worker is told to let it go
    while sum(kept_on_workers(direct).values()):
        assert time.monotonic() < deadline, "a released result stayed on its worker"
        time.sleep(0.05)


def test_errors_and_retries_on_the_direct_route(direct):
    with pytest.raises(ValueError, match="boom"):
        direct.submit(tasks.fail, "boom").result(timeout=30)
    assert direct.submit(tasks.flaky, 2, retries=3).result(timeout=30) == 2


def test_a_worker_runs_no_more_tasks_than_its_threads_whatever_the_route(direct):
    refs = [direct.submit(tasks.overlap_probe, 0.05, route=route)
            for route in ("direct", "dask") * 10]  # fmt: skip
    assert max(direct.gather(refs, timeout=60)) == 1


def test_a_deep_tree_finishes_on_one_thread_per_worker(direct):
    # Each waiting parent lends its slot: 40 tasks, depth 3, on two threads.
    assert direct.submit(tasks.tree, 3, 3).result(timeout=60) == 27


def test_a_task_waiting_for_a_slot_can_be_cancelled(direct):
    blockers = [direct.submit(tasks.sleep_then, i, 0.5) for i in range(4)]  # fill the pipeline
    waiting = direct.submit(tasks.inc, 1)
    assert waiting.cancel()
    with pytest.raises(Exception, match="cancel"):
        waiting.result(timeout=30)
    assert direct.gather(blockers, timeout=30) == list(range(4))


def test_tasks_in_flight_on_a_killed_worker_run_again_on_another(fresh):
    refs = [fresh.submit(tasks.sleep_then, i, 0.2, retries=2) for i in range(20)]
    pids = fresh.client.run(os.getpid)
    victim = sorted(pids)[0]
    threading.Timer(0.5, os.kill, (pids[victim], signal.SIGKILL)).start()
    assert fresh.gather(refs, timeout=90) == list(range(20))
    assert fresh.stats()["workers_lost"] >= 1


def test_a_large_result_lost_with_its_worker_is_computed_again(fresh):
    big = fresh.submit(tasks.zeros, KEEP_FROM_BYTES // 8 + 1)
    big.result(timeout=30)
    holder = next(address for address, n in kept_on_workers(fresh).items() if n)
    os.kill(fresh.client.run(os.getpid)[holder], signal.SIGKILL)
    assert len(big.result(timeout=60)) == KEEP_FROM_BYTES // 8 + 1
    assert fresh.stats()["recomputed"] >= 1


def test_what_does_not_pickle_fails_its_own_task_only(direct):
    lock = threading.Lock()
    refs = [direct.submit(tasks.inc, 1), direct.submit(tasks.length, lock),
            direct.submit(tasks.a_lock), direct.submit(tasks.inc, 2)]  # fmt: skip
    with pytest.raises(TypeError, match="cannot be sent to the worker"):
        refs[1].result(timeout=30)
    with pytest.raises(TypeError, match="cannot be sent back"):
        refs[2].result(timeout=30)
    assert [refs[0].result(timeout=30), refs[3].result(timeout=30)] == [2, 3]


def test_a_straggler_on_the_direct_route_is_backed_up_and_results_are_unchanged(direct):
    slow = sorted(direct.nthreads)[0]
    expected = [i * i for i in range(8)]

    def round_(name="work"):
        refs = [direct.submit(tasks.work, i, 0.05, speculative=True, name=name)
                for i in range(8)]  # fmt: skip
        return direct.gather(refs, timeout=60)

    assert round_() == expected  # durations for the planner
    inject_faults(direct, slow_workers={slow: 20.0})
    try:
        before = direct.stats()
        for _ in range(6):
            assert round_() == expected  # no loss, no duplicates
            if direct.stats()["backup_won"] > before["backup_won"]:
                break
        else:
            pytest.fail("no backup won against a worker 20 times slower in 6 rounds")
    finally:
        clear_faults(direct)


def test_a_put_travels_once_per_stream_and_its_tasks_stay_on_the_direct_route(direct):
    weights = direct.put(list(range(50_000)))
    refs = [direct.submit(tasks.length, weights) for _ in range(40)]
    assert direct.gather(refs, timeout=60) == [50_000] * 40
    assert not {ref.key for ref in refs} & scheduler_keys(direct)  # no hop through Dask
    sent = [channel.puts for channel in direct.backend.streams.channels.values()]
    assert all(list(puts.values()) == [weights.task_id] for puts in sent if puts)
    assert sum(kept_on_workers(direct).values()) == sum(1 for puts in sent if puts)
    del weights, refs
    gc.collect()
    assert direct.submit(tasks.inc, 1).result(timeout=30) == 2  # the release goes with it
    deadline = time.monotonic() + 10
    while sum(kept_on_workers(direct).values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sum(kept_on_workers(direct).values()) == 0
    assert not any(channel.puts for channel in direct.backend.streams.channels.values())


def test_the_engine_page_shows_a_running_task_and_its_worker(direct):
    import json
    import urllib.request

    slow = direct.submit(tasks.sleep_then, 1, 1.5, name="slow-on-page")
    link = direct.page_link
    deadline = time.monotonic() + 10
    while True:
        view = json.loads(urllib.request.urlopen(f"{link}json", timeout=5).read())
        shown = [(w, t["name"]) for w, info in view["workers"].items() for t in info["tasks"]]
        if any(name == "slow-on-page" for _, name in shown):
            break
        assert time.monotonic() < deadline, f"the page never showed the task: {view}"
        time.sleep(0.1)
    (worker,) = {w for w, name in shown if name == "slow-on-page"}
    assert worker in direct.nthreads
    page = urllib.request.urlopen(link, timeout=5).read().decode()
    assert "slow-on-page" in page and worker in page and 'http-equiv="refresh"' in page
    assert slow.result(timeout=30) == 1
    finished = json.loads(urllib.request.urlopen(f"{link}json", timeout=5).read())
    assert finished["by_name"]["slow-on-page"]["finished"] == 1


class TestDirectRouteEngine(EngineConformance):
    """Everything the engine promises, with plain tasks on the task stream alone."""

    route = "stream"

    @pytest.fixture
    def eng(self, direct):
        return direct


def test_a_cancelled_running_task_gives_its_slot_to_the_next(direct):
    slow = [direct.submit(tasks.sleep_then, i, 4.0) for i in range(2)]  # one per worker
    time.sleep(0.5)  # both running
    for ref in slow:
        assert ref.cancel()
    start = time.perf_counter()
    assert direct.gather([direct.submit(tasks.inc, i) for i in range(4)], timeout=10) == [
        1,
        2,
        3,
        4,
    ]
    assert time.perf_counter() - start < 3.0  # did not wait for the 4 s tasks to end


def test_a_task_s_story_tells_the_worker_s_half_in_its_order(direct):
    ref = direct.submit(tasks.inc, 1)
    assert ref.result(timeout=30) == 2
    story = direct.story(ref)
    told = [
        line.split("Worker: ")[1].split(": ", 1)
        for line in story.splitlines()
        if "Worker: " in line
    ]
    (address,) = {where for where, _ in told}
    assert address in direct.worker_addresses()
    said = [what for _, what in told]
    assert said[0] == "received; queued for a slot", story
    assert said[1].startswith("running in hrl-task") and said[2].startswith("ended after")
    assert said[2].endswith("answered OK") and "on the engine's stream" in story
    big = direct.submit(tasks.zeros, KEEP_FROM_BYTES // 8 + 1)
    assert direct.submit(tasks.length, big).result(timeout=30) == KEEP_FROM_BYTES // 8 + 1
    assert "B) kept here, its size answered" in direct.story(big)
    slow = direct.submit(tasks.sleep_then, 0, 1.0)
    time.sleep(0.3)  # running
    assert slow.cancel()
    deadline = time.monotonic() + 10
    while "no answer sent" not in direct.story(slow):
        assert time.monotonic() < deadline, direct.story(slow)
        time.sleep(0.2)
    assert "cancelled while it ran: its slot goes on" in direct.story(slow)


def test_a_frozen_worker_s_half_of_a_story_is_missed_within_bounds(fresh):
    ref = fresh.submit(tasks.inc, 1)
    assert ref.result(timeout=30) == 2
    (address,) = fresh.state.story_workers(ref.task_id)[0]
    pid = fresh.client.run(os.getpid)[address]
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        story = fresh.story(ref)
        assert time.monotonic() - start < 10
        assert f"{address}: did not tell its half (TimeoutError)" in story
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "received; queued for a slot" in fresh.story(ref)


def close_task_service(dask_worker):
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    WorkerRuntime.of(dask_worker).task_service.close()  # as the worker's close does


def test_a_closing_worker_ends_its_task_streams_at_once(fresh):
    # A stream taken over from Dask's comm is not among the comms Dask closes.
    refs = fresh.map(tasks.inc, range(8))
    assert fresh.gather(refs, timeout=30) == list(range(1, 9))
    address, channel = sorted(fresh.backend.streams.channels.items())[0]
    fresh.client.run(close_task_service, workers=[address])
    deadline = time.monotonic() + 5
    while not channel.closed:
        assert time.monotonic() < deadline, "the engine's end of the stream stayed open"
        time.sleep(0.05)
