"""The Dask backend on a real LocalCluster with worker processes."""

import time

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks
from tests.scheduler.conformance import CallConformance, EngineConformance

pytestmark = pytest.mark.cluster


class TestDaskEngine(EngineConformance):
    """Everything the engine promises, with plain tasks on Dask's route alone."""

    route = "dask"

    @pytest.fixture
    def eng(self, engine):
        default, engine.route = engine.route, "dask"
        yield engine
        engine.route = default


class TestCallRoute(CallConformance):
    """What direct calls promise, each on the call route alone."""

    @pytest.fixture
    def eng(self, engine):
        return engine


@pytest.fixture(params=["dask", "direct"])
def routed(engine, request):
    """The module's engine sending plain tasks by one route, then the other."""
    default, engine.route = engine.route, request.param
    yield engine
    engine.route = default


@pytest.mark.parametrize("resources", [None, {"CPU": 1}])
def test_nested_tree_deeper_than_the_threads(routed, resources):
    # depth 4, fan-out 3: 40 waiting parents on 2 workers with one thread each
    ref = routed.submit(tasks.tree, 4, 3, resources, resources=resources)
    assert ref.result(timeout=60) == 81


def test_resource_error_is_fast_and_says_what_workers_have(engine):
    start = time.monotonic()
    with pytest.raises(hrl.ResourceError) as info:
        engine.submit(tasks.inc, 1, resources={"GPU": 1})
    assert time.monotonic() - start < 1.0
    message = str(info.value)
    assert "GPU=1" in message and "CPU=1" in message
    for worker in engine.client.scheduler_info()["workers"]:
        assert worker in message


def test_a_request_that_fits_later_waits(routed):
    # CPU=2 fits nowhere now but a worker declares 1 only: that is a ResourceError,
    # while CPU=1 on a busy cluster just waits its turn.
    with pytest.raises(hrl.ResourceError):
        routed.submit(tasks.inc, 1, resources={"CPU": 2})
    busy = [routed.submit(tasks.sleep_then, i, 0.3, resources={"CPU": 1}) for i in range(4)]
    assert routed.gather(busy, timeout=30) == [0, 1, 2, 3]


def test_task_ref_after_retry_feeds_its_dependents(routed):
    upstream = routed.submit(tasks.flaky, 1, retries=2)
    downstream = routed.submit(tasks.add, upstream, 100)
    assert downstream.result(timeout=30) == 101
    assert upstream.attempts == 2


def test_retry_attempts_get_fresh_keys(routed):
    ref = routed.submit(tasks.flaky, 2, retries=2)
    keys = set()
    while not ref.done():
        keys.add(ref.key)
        time.sleep(0.001)
    keys.add(ref.key)
    assert ref.result() == 2 and ref.attempts == 3
    assert all(k.startswith("flaky-") for k in keys)


def test_cancel(routed):
    slow = routed.submit(tasks.sleep_then, 1, 1.0)
    assert slow.cancel()
    with pytest.raises(Exception, match="cancelled"):
        slow.result(timeout=5)
    assert not slow.cancel()


def _pool_threads(dask_worker):
    return len(dask_worker.executors["default"]._threads)


def _dask_executing(dask_worker):
    return len(dask_worker.state.executing)


def _executing(dask_worker):
    """Engine tasks running here, on either route."""
    from hrl_tasks.scheduler.runtime import RUNTIME_NAME

    runtime = dask_worker.plugins.get(RUNTIME_NAME)
    direct = 0 if runtime is None else sum(c.route == "direct" for c in runtime.running.values())
    return len(dask_worker.state.executing) + direct


def test_a_cancelled_running_task_gives_its_thread_to_the_next(routed):
    # Both single-thread workers busy with 4 s tasks; cancel them once running.
    slow = [routed.submit(tasks.sleep_then, i, 4.0) for i in range(2)]
    deadline = time.monotonic() + 10
    while sum(routed.client.run(_executing).values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    for ref in slow:
        assert ref.cancel()
    start = time.perf_counter()
    assert routed.submit(tasks.inc, 0).result(timeout=10) == 1  # one task alone, too
    assert routed.gather([routed.submit(tasks.inc, i) for i in range(4)], timeout=10) == [
        1, 2, 3, 4,
    ]  # fmt: skip
    assert time.perf_counter() - start < 3.0  # did not wait for the 4 s tasks to end
    # The cancelled tasks ran to their end on threads that then left: one per worker again.
    time.sleep(4.5)
    assert set(routed.client.run(_pool_threads).values()) <= {0, 1}  # (0: the direct route's)


def test_a_task_cancelled_while_it_waits_for_a_slot_never_runs(engine):
    # Direct-route tasks hold both workers' one slot; Dask then starts its tasks, which
    # wait for a slot before the engine tracks them. Cancelled there, they never run,
    # and the tasks after them need not wait for theirs to end.
    holders = [engine.submit(tasks.sleep_then, i, 1.5, route="direct") for i in range(2)]
    waiting = [engine.submit(tasks.sleep_then, i, 4.0, route="dask") for i in range(2)]
    deadline = time.monotonic() + 10
    while sum(engine.client.run(_dask_executing).values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    for ref in waiting:
        assert ref.cancel()
    start = time.perf_counter()
    assert engine.gather(holders, timeout=10) == [0, 1]
    later = [engine.submit(tasks.inc, i, route="dask") for i in range(4)]
    assert engine.gather(later, timeout=10) == [1, 2, 3, 4]
    assert time.perf_counter() - start < 3.5  # the 1.5 s holders, not the 4 s tasks
    assert sum(engine.client.run(_executing).values()) == 0


def test_queued_calls_start_in_their_order_on_the_one_thread(engine):
    # Dask runs the newest of equal-priority tasks first unless submissions are a
    # generation apart; then each call would wait for its turn on a thread of its own.
    log = engine.create_worker(tasks.ThreadLog)
    refs = [log.call("record", 0, 0.3)] + [log.call("record", i) for i in range(1, 8)]
    results = engine.gather(refs, timeout=30)
    assert [i for i, _, _ in results] == list(range(8))
    assert len({thread for _, thread, _ in results}) == 1
    starts = [started for _, _, started in results]
    assert starts == sorted(starts)
    log.kill()


def test_call_order_holds_when_an_argument_arrives_late(engine):
    box = engine.create_worker(tasks.Box)
    late = engine.submit(tasks.sleep_then, "payload", 0.5)
    put = box.call("put", late)
    got = box.call("get")
    assert got.result(timeout=30) == "payload"
    assert put.result() is True
    box.kill()


def test_call_results_are_dependencies(engine):
    counter = engine.create_worker(tasks.Counter, start=1)
    value = counter.call("add", 4)
    assert engine.submit(tasks.add, value, 1000).result(timeout=30) == 1005
    done, _ = engine.wait([value, engine.submit(tasks.inc, 1)], timeout=30)
    assert value in done
    counter.kill()


def test_unknown_method_names_the_methods_there_are(engine):
    counter = engine.create_worker(tasks.Counter)
    with pytest.raises(AttributeError, match="no method 'ad'.*add"):
        counter.call("ad", 1).result(timeout=30)
    assert counter.call("add", 2).result(timeout=30) == 2
    counter.kill()


def test_broken_factory(engine):
    handle = engine.create_worker(tasks.Broken)
    with pytest.raises(hrl.ObjectStartError, match="exploded"):
        handle.ready(timeout=30)
    with pytest.raises(hrl.ObjectStartError):
        handle.call("anything").result(timeout=30)


def test_stats_have_durations_from_execution(routed):
    name = f"sleepy-{routed.route}"
    routed.gather(routed.map(tasks.sleep_then, range(4), [0.2] * 4, name=name), timeout=30)
    deadline = time.monotonic() + 5  # durations travel in batches, every 0.1 s
    while time.monotonic() < deadline:
        if routed.stats()["by_name"].get(name, {}).get("count") == 4:
            break
        time.sleep(0.05)
    sleepy = routed.stats()["by_name"][name]
    assert sleepy["count"] == 4
    assert 0.19 < sleepy["p50"] < 0.5


def test_current_engine_in_the_driver(engine):
    assert hrl.current_engine() is engine


def test_a_task_waits_for_objects_built_on_its_own_worker(engine):
    # One thread per worker: the task's thread must leave the pool while it waits for
    # an object placed on its own worker, or the object is never built. Objects made in
    # a task avoid its worker while another has room: the second one fills it.
    made = engine.submit(tasks.objects_made_and_awaited_in_a_task, 2, {"CPU": 1})
    (first, second), own = made.result(timeout=60)
    assert first != own and second == own


def test_a_read_of_the_workers_never_counts_a_holding_twice(engine):
    # A holding lowers what its worker advertises, then is recorded (release: the
    # reverse); a reader adds the two. Read while objects come and go, a worker may
    # seem to have less for a moment, never more than it declares: the one read takes
    # both at once (read apart, a holding made between them counted twice).
    import threading

    # Each worker declares a CPU per thread (one). A read now may itself fall in an
    # earlier test's release, so the bound is the declaration, not a first read.
    declared = {
        w: {"CPU": float(threads)} for w, (threads, _) in engine.backend.read_workers().items()
    }
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            seen.append(engine.backend.read_workers())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(40):
            handle = engine.create_worker(tasks.Counter, resources={"CPU": 1}).ready(timeout=20)
            handle.kill(timeout=20)
    finally:
        stop.set()
        reader.join()
    assert len(seen) > 8
    for workers in seen:
        for address, (_, resources) in workers.items():
            assert resources["CPU"] <= declared[address]["CPU"], (address, resources)


def test_a_supply_change_to_a_worker_that_does_not_answer_holds_up_no_other(engine):
    # A worker killed as an object is placed on it: Dask retries the connection to it for
    # 30 s. Objects placed on other workers meanwhile, and reads of the workers, go on.
    from hrl_tasks.scheduler import events as ev

    gone = "tcp://127.0.0.1:9"  # nothing listens there
    engine.backend.carry_out(ev.Supply(gone, "no-such-object", {"CPU": -1.0}, {"CPU": 1.0}))
    started = time.monotonic()
    handle = engine.create_worker(tasks.Counter, resources={"CPU": 1})
    try:
        assert handle.call("add", 1).result(timeout=20) == 1
        assert engine.backend.read_workers()
        assert time.monotonic() - started < 20  # not behind the 30 s of the unanswered one
    finally:
        handle.kill(timeout=20)


def test_rebuild_arguments_for_an_object_that_ended_are_dropped_quietly(engine):
    # A WorkerSet updates them on every weights sync, also after its workers ended (a
    # lost scheduler ends them all): nothing is re-created, and nothing raises.
    handle = engine.create_worker(tasks.Counter, start=10).ready(timeout=20)
    handle.rebuild_with(start=100)
    assert handle.call("add", 1).result(timeout=20) == 11  # the live object is unchanged
    handle.kill(timeout=20)
    handle.rebuild_with(start=0)


def test_the_root_engine_sees_what_a_nested_engine_holds(engine):
    from distributed import Event

    held = engine.submit(tasks.hold_an_object_until, "nested-holds", {"CPU": 1})
    assert Event("nested-holds-made", client=engine.client).wait(timeout=60)
    mine = engine.create_worker(tasks.Counter, resources={"CPU": 1})  # placed on return
    try:
        # The holding task keeps its worker's one thread (an Event's wait is not the
        # engine's): it ends before ours can be built there.
        Event("nested-holds", client=engine.client).set()
        assert mine.address != held.result(timeout=60)
        mine.ready(timeout=20)
    finally:
        mine.kill(timeout=20)


def test_objects_made_in_a_task_go_elsewhere_than_its_worker_when_there_is_room(engine):
    addresses, own = engine.submit(tasks.objects_made_and_awaited_in_a_task, 3).result(timeout=60)
    assert own not in addresses and len(addresses) == 3


def test_nested_engines_hear_worker_events(engine):
    assert engine.submit(tasks.nested_engine_hears_worker_events).result(timeout=30)


def test_the_scheduler_forgets_old_default_spans_but_not_named_ones(engine):
    """Dask keeps a span per burst of tasks for its whole life (distributed#7977); a
    search's driver grew by one per trial. The engine's scheduler plugin drops old ones."""
    import distributed

    from hrl_tasks.scheduler.worker_events import SPANS_KEPT

    client = engine.client
    with distributed.span("kept-by-name"):
        assert client.submit(tasks.inc, 0, pure=False).result(timeout=30) == 1
    forgotten, bursts = 0, 0
    while forgotten < 10 and bursts < 5_000:  # a burst after the last ended: a new span
        for i in range(50):
            assert client.submit(tasks.inc, i, pure=False).result(timeout=30) == i + 1
        bursts += 50
        defaults, named, forgotten = client.run_on_scheduler(tasks.default_spans)
        assert len(defaults) <= SPANS_KEPT + 1
    assert forgotten >= 10, f"{bursts} bursts of tasks made no more than {SPANS_KEPT} spans"
    assert ("kept-by-name",) in named
    assert client.submit(tasks.inc, 1, pure=False).result(timeout=30) == 2  # spans still work
    assert defaults[-1] in client.run_on_scheduler(tasks.default_spans)[0]  # the newest stays


def test_a_client_that_connects_later_gets_the_embedded_clusters_short_message_log(engine):
    """The scheduler makes a stream, with a log of the batches it sent, for each client
    when it connects: a worker's own client connects after the start (a search's driver
    filled two logs of 1,000 batches for half an hour)."""
    import dask

    from hrl_tasks.scheduler.clusters import local_settings

    length = local_settings()["distributed.admin.low-level-log-length"]
    assert dask.config.get("distributed.admin.low-level-log-length") == length
    late = engine.client.submit(tasks.worker_client_id, pure=False).result(timeout=30)
    stream = engine.cluster.scheduler.client_comms[late]
    assert stream.recent_message_log.maxlen == length


@pytest.mark.skipif(
    tuple(int(x) for x in __import__("distributed").__version__.split(".")[:2]) < (2024, 12),
    reason="distributed 2024.8's LocalCluster waits for ever for such workers instead of failing",
)
def test_a_script_without_a_main_guard_is_told_why_workers_did_not_start(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text("import hrl_tasks\nhrl_tasks.Engine.local(n_workers=1).close()\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # fmt: skip
    assert run.returncode != 0
    # The error ends the traceback (multiprocessing may warn of leaked semaphores after it).
    *_, error = [x for x in run.stderr.splitlines() if x.startswith("hrl_tasks.scheduler.errors")]
    assert "did not start" in error and 'if __name__ == "__main__":' in error, run.stderr[-2000:]


def test_a_malloc_setting_in_the_drivers_environment_reaches_the_embedded_workers():
    # docs/benchmarks.md (memory soak) recommends it for long IMPALA runs.
    import os
    import subprocess
    import sys

    code = ("import os, hrl_tasks\nif __name__ == '__main__':\n"
            "    with hrl_tasks.Engine.local(n_workers=1) as engine:\n"
            "        print(set(engine.client.run(os.getenv, 'MALLOC_MMAP_THRESHOLD_').values()))")  # fmt: skip
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.stdout.strip().splitlines()[-1] == "{'65536'}", run.stderr[-2000:]
