"""Worker processes killed with SIGKILL while work is under way."""

import logging
import os
import signal
import threading
import time

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import clear_faults, inject_faults, settings
from hrl_tasks.scheduler.taskref import Kept
from tests.scheduler import tasks

KEEP_FROM_BYTES = settings.value("keep-from")  # results this large stay on their worker

pytestmark = pytest.mark.cluster


@pytest.fixture
def fresh():
    """Its own cluster: these tests kill worker processes."""
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        yield engine


def worker_pids(engine):
    return engine.client.run(os.getpid)


def kill_worker(engine, address):
    os.kill(worker_pids(engine)[address], signal.SIGKILL)


def test_kill9_during_fanout_loses_and_doubles_nothing(fresh):
    refs = [fresh.submit(tasks.sleep_then, i, 0.05, retries=2) for i in range(50)]
    victim = sorted(worker_pids(fresh))[0]
    threading.Timer(0.4, kill_worker, (fresh, victim)).start()
    assert fresh.gather(refs, timeout=90) == list(range(50))
    assert any(r.attempts > 1 for r in refs), "the kill hit no running task"
    stats = fresh.stats()
    assert stats["workers_lost"] >= 1
    assert stats["finished"] == 50 and stats["failed"] == 0


def test_no_retry_budget_means_worker_lost_error(fresh):
    ref = fresh.submit(tasks.pid_and_address, retries=0)
    _, address = ref.result(timeout=30)
    slow = fresh.submit(tasks.sleep_then, 1, 30, retries=0)
    time.sleep(0.5)
    for pid in worker_pids(fresh).values():
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(hrl.WorkerLostError, match="no retries left"):
        slow.result(timeout=60)


def test_stateful_counter_survives_its_worker(fresh):
    counter = fresh.create_worker(tasks.Counter, start=100)
    assert fresh.gather([counter.call("add", 1) for _ in range(5)], timeout=30)[-1] == 105
    first_home = counter.address
    kill_worker(fresh, first_home)
    start = time.monotonic()
    while counter.restarts == 0 and time.monotonic() - start < 30:
        time.sleep(0.05)
    assert counter.restarts == 1, "not re-created within 30 s"
    assert counter.call("add", 1).result(timeout=30) == 106
    assert counter.address != first_home


@pytest.mark.parametrize("direct", [False, True])
def test_call_in_flight_fails_with_worker_lost(fresh, direct):
    counter = fresh.create_worker(tasks.Counter, start=0)
    counter.ready(timeout=30)
    in_flight = counter.call("slow_add", 1, 20, direct=direct)
    time.sleep(0.5)
    start = time.monotonic()
    kill_worker(fresh, counter.address)
    with pytest.raises(hrl.WorkerLostError, match="Counter.*reissue_calls"):
        in_flight.result(timeout=30)
    assert time.monotonic() - start < 30
    assert counter.call("value", direct=direct).result(timeout=30) == 0


@pytest.mark.parametrize("direct", [False, True])
def test_call_in_flight_is_reissued_when_allowed(fresh, direct):
    counter = fresh.create_worker(tasks.Counter, start=0, reissue_calls=True)
    counter.ready(timeout=30)
    in_flight = counter.call("slow_add", 5, 1.0, direct=direct)
    queued = counter.call("add", 1, direct=direct)
    time.sleep(0.3)
    kill_worker(fresh, counter.address)
    assert in_flight.result(timeout=30) == 5
    assert queued.result(timeout=30) == 6


def test_a_shared_value_whose_holder_died_is_sent_again(fresh):
    holder, other = (fresh.create_worker(tasks.Box, strategy="spread") for _ in range(2))
    assert holder.ready(timeout=30).address != other.ready(timeout=30).address
    shared = fresh.share(list(range(1000)))
    assert holder.call("put", shared, direct=True).result(timeout=30)
    kill_worker(fresh, holder.address)
    assert other.call("put", shared, direct=True).result(timeout=30)
    assert other.call("get", direct=True).result(timeout=30) == list(range(1000))


def test_a_shared_value_whose_holder_is_frozen_is_sent_again(fresh):
    """A stopped process still accepts connections: the peer's ask for the value is
    bounded, and the driver sends it, instead of waiting for the holder to run again."""
    boxes = [fresh.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    assert len({b.ready().address for b in boxes}) == 2
    shared = fresh.share({"w": np.arange(1000, dtype=np.float32)})
    assert boxes[0].call("put", shared, direct=True).result(timeout=30) is True
    holder = worker_pids(fresh)[boxes[0].address]
    os.kill(holder, signal.SIGSTOP)
    try:
        start = time.monotonic()
        assert boxes[1].call("put", shared, direct=True).result(timeout=60) is True
        assert time.monotonic() - start < 15  # not until the holder runs again
    finally:
        os.kill(holder, signal.SIGCONT)
    got = boxes[1].call("get", direct=True).result(timeout=30)
    np.testing.assert_array_equal(got["w"], np.arange(1000, dtype=np.float32))


def test_a_shared_value_is_held_for_the_others_by_a_worker_that_reports(fresh):
    """Once the engine hears a worker stopped reporting, a new shared value's first
    call there carries it but leaves it to a worker that reports to hold it for the
    others (they would ask the frozen one, and wait)."""
    boxes = [fresh.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    frozen = sorted(boxes, key=lambda b: b.ready(timeout=30).address)[0]
    live = next(b for b in boxes if b is not frozen)
    pid = worker_pids(fresh)[frozen.address]
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 20
        while frozen.address not in fresh.state.silent:
            assert time.monotonic() < deadline, "the freeze was not heard"
            time.sleep(0.1)
        shared = fresh.share({"w": np.arange(1000, dtype=np.float32)})
        waiting = frozen.call("put", shared, direct=True)
        assert live.call("put", shared, direct=True).result(timeout=30) is True
        assert shared.holder == live.address and not waiting.done()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert waiting.result(timeout=30) is True


def holders_of(engine, refs) -> dict:
    """The workers holding each finished ref's result: Dask's, or the direct route's
    kept results."""
    values = [ref.outcome.result() for ref in refs]
    if all(isinstance(v, Kept) for v in values):
        return {v.key: (v.address,) for v in values}
    return engine.client.who_has(values)


@pytest.mark.parametrize("route", ["dask", "direct"])
def test_a_finished_result_whose_worker_is_frozen_is_computed_again_elsewhere(fresh, route):
    """A stopped process still accepts the fetch's connection and never answers; its
    heartbeats stop, and the tasks whose results it holds run again elsewhere (on
    the direct route, results large enough to stay on their worker)."""
    n = KEEP_FROM_BYTES // 8 + 1
    refs = [fresh.submit(tasks.zeros, n, route=route) for _ in range(8)]
    fresh.wait(refs, timeout=30)
    holders = holders_of(fresh, refs)
    frozen = sorted({a for held in holders.values() for a in held})[0]
    on_frozen = [ref for ref in refs if set(holders[ref.outcome.result().key]) == {frozen}]
    pid = worker_pids(fresh)[frozen]
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        assert [len(v) for v in fresh.gather(refs, timeout=60)] == [n] * 8
        assert time.monotonic() - start < 15  # not Dask's 30 s connect time-out
    finally:
        os.kill(pid, signal.SIGCONT)
    assert fresh.stats()["recomputed"] >= len(on_frozen) > 0


def test_object_gives_up_after_max_restarts(fresh):
    box = fresh.create_worker(tasks.Box, max_restarts=0)
    box.ready(timeout=30)
    kill_worker(fresh, box.address)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            box.call("get").result(timeout=30)
        except hrl.WorkerLostError as exc:
            assert "max_restarts" in str(exc)
            break
        time.sleep(0.2)
    else:
        pytest.fail("calls still succeed on an object that may not restart")


def test_ledger_follows_workers_that_leave_and_join(fresh):
    before = set(fresh.ledger.capacity)
    victim = sorted(before)[0]
    kill_worker(fresh, victim)
    deadline = time.monotonic() + 30  # the nanny starts a new worker process
    while time.monotonic() < deadline:
        now = set(fresh.ledger.capacity)
        if victim not in now and len(now) == 2:
            break
        time.sleep(0.1)
    now = set(fresh.ledger.capacity)
    assert victim not in now and len(now) == 2
    assert all(fresh.ledger.capacity[w]["CPU"] == 1 for w in now)


def test_closing_a_local_engine_leaves_no_process_behind():
    import psutil

    engine = hrl.Engine.local(n_workers=2, threads_per_worker=1)
    pids = list(worker_pids(engine).values())
    engine.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if psutil.pid_exists(p)]
    assert not alive, f"processes left behind: {alive}"


def total_plus(values, extra):
    return int(sum(values)) + extra


def test_a_put_value_whose_holder_died_is_sent_again(fresh):
    # On the Dask route a put lives in Dask; the direct route sends it from the driver.
    ref = fresh.put(list(range(10)))
    (holder,) = fresh.client.who_has([ref.outcome.result()]).popitem()[1]
    slow = fresh.submit(tasks.sleep_then, 5, 3, route="dask")
    waiting = fresh.submit(total_plus, ref, slow, route="dask")  # queued in Dask when lost
    time.sleep(0.3)
    kill_worker(fresh, holder)
    assert waiting.result(timeout=60) == 50
    assert fresh.submit(total_plus, ref, 1, route="dask").result(timeout=60) == 46  # after
    assert fresh.stats()["inputs_resent"] >= 1
    assert fresh.submit(total_plus, ref, 2, route="direct").result(timeout=60) == 47


def test_a_value_put_on_every_worker_outlives_one_of_them(fresh):
    ref = fresh.put(list(range(10)), broadcast=True)
    deadline = time.monotonic() + 30  # the copies travel in the background
    while len(holders := fresh.client.who_has([ref.outcome.result()]).popitem()[1]) < 2:
        assert time.monotonic() < deadline, f"copies on {holders} only"
        time.sleep(0.05)
    assert sorted(holders) == sorted(fresh.nthreads)
    kill_worker(fresh, holders[0])
    assert fresh.submit(total_plus, ref, 1, route="dask").result(timeout=60) == 46
    assert fresh.submit(total_plus, ref, 2, route="direct").result(timeout=60) == 47
    assert fresh.stats()["inputs_resent"] == 0  # the other copy served: nothing sent again


def test_the_engine_hears_when_a_worker_stops_reporting_and_when_it_reports_again(fresh):
    frozen = sorted(fresh.nthreads)[0]
    pid = worker_pids(fresh)[frozen]

    def silent_becomes(expected):
        deadline = time.monotonic() + 20
        while fresh.state.silent != expected:
            assert time.monotonic() < deadline, f"silent: {fresh.state.silent}"
            time.sleep(0.1)

    def status_on_scheduler():
        return fresh.client.run_on_scheduler(
            lambda dask_scheduler, address=frozen: dask_scheduler.workers[address].status.name
        )

    os.kill(pid, signal.SIGSTOP)
    try:
        silent_becomes({frozen})
        assert status_on_scheduler() == "paused"  # Dask places and steals nothing there
    finally:
        os.kill(pid, signal.SIGCONT)
    silent_becomes(set())
    assert status_on_scheduler() == "running"


def test_a_value_put_on_every_worker_while_one_is_frozen_waits_for_none(fresh):
    """A stopped worker accepts a copy's connection and never answers: the put
    and the tasks reading the value go on with the workers that still report."""
    fresh.submit(tasks.inc, 0).result(timeout=30)  # the workers import the task module
    frozen = sorted(fresh.nthreads)[0]
    pid = worker_pids(fresh)[frozen]
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        ref = fresh.put(list(range(10)), broadcast=True)
        refs = [fresh.submit(total_plus, ref, i, speculative=True) for i in range(4)]
        assert fresh.gather(refs, timeout=60) == [45 + i for i in range(4)]
        assert time.monotonic() - start < 15  # not until the frozen worker runs again
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_dependent_of_a_call_result_lost_with_its_worker_fails_clearly(fresh):
    counter = fresh.create_worker(tasks.Counter, start=1)
    result = counter.call("add", 1)
    assert result.result(timeout=30) == 2
    kill_worker(fresh, counter.address)
    start = time.monotonic()
    with pytest.raises(hrl.WorkerLostError, match="result of 'Counter.add' was lost"):
        fresh.submit(tasks.inc, result).result(timeout=60)
    assert time.monotonic() - start < 30  # not a wait for a worker that never returns


def test_a_result_kept_off_a_slow_worker_is_computed_again_after_its_worker_dies(fresh):
    """Speculative work avoids a worker known to be slow; when the worker that
    computed it dies, the result is computed again on what is left (the avoided
    worker, or the one that replaced the dead one), never waits for the dead one.
    Dask's route: a small result of the direct route is in the driver already."""
    slow, fast = sorted(fresh.nthreads)
    fresh.submit(tasks.work, 0, 0.05).result(timeout=30)  # the workers import the task module
    inject_faults(fresh, slow_workers={slow: 40.0})
    for _ in range(8):
        refs = [fresh.submit(tasks.work, i, 0.05, speculative=True, route="dask") for i in range(8)]
        assert fresh.gather(refs, timeout=60) == [i * i for i in range(8)]
        if slow in fresh.slow_workers():
            break
    else:
        pytest.fail("the slow worker was not noticed in 8 rounds")
    clear_faults(fresh)
    ref = fresh.submit(tasks.work, 7, 0.05, speculative=True, route="dask")
    fresh.wait([ref], timeout=30)
    assert fresh.client.who_has([ref.future])[ref.future.key] == (fast,)
    kill_worker(fresh, fast)
    assert ref.result(timeout=60) == 49


def test_replicate_and_broadcast_on_the_engines_client_keep_its_connection(fresh, caplog):
    """Dask logs replicas' WorkerStates to its "all" topic, which cannot reach a client:
    the engine hears of workers on a topic of its own, with plain data."""
    client = fresh.client
    future = client.submit(tasks.inc, 1, pure=False)
    with caplog.at_level(logging.ERROR):
        client.replicate([future])
        client.scatter([1, 2, 3], broadcast=True)
        time.sleep(0.5)
    assert not [r for r in caplog.records if "Closed comm" in r.getMessage()]
    assert fresh.submit(tasks.inc, 5).result(timeout=30) == 6
    kill_worker(fresh, sorted(worker_pids(fresh))[0])
    deadline = time.monotonic() + 20
    while fresh.stats()["workers_lost"] == 0:  # counted from the scheduler's event only
        assert time.monotonic() < deadline, "the engine did not hear of the lost worker"
        time.sleep(0.1)
    assert client.status == "running"


def test_a_finished_result_lost_with_the_put_it_was_computed_from_is_computed_again(fresh):
    """A task's result and the put value it was computed from die together before the
    result was fetched: Dask cannot compute it again (a put has no recipe) and forgets
    it. The engine runs the task again, with the put value sent again."""
    ref = fresh.put(list(range(10)))
    (holder,) = fresh.client.who_has([ref.outcome.result()]).popitem()[1]
    done = fresh.submit(total_plus, ref, 1, route="dask")
    fresh.wait([done], timeout=30)
    for address in {holder, *fresh.client.who_has([done.future])[done.future.key]}:
        kill_worker(fresh, address)
    assert done.result(timeout=60) == 46
    assert fresh.stats()["recomputed"] == 1
    after = fresh.submit(total_plus, ref, 2, route="dask")
    assert fresh.gather([done, after], timeout=60) == [46, 47]
    fresh.validate()
