"""Direct calls of stateful workers on a real cluster, and their pieces without one."""

import asyncio
import gc
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler.settings import validating
from hrl_tasks.scheduler.shared import Shared, SharedRef, SharedValue, direct_arguments, inline
from hrl_tasks.scheduler.worker_objects import DIRECT_THREADS
from tests.scheduler import tasks


def test_a_shared_value_rides_with_the_first_call_and_is_referenced_after():
    shared = Shared(np.arange(3))
    first, values = direct_arguments(((shared,), {"w": [shared]}), "tcp://a")
    assert isinstance(first[0][0], SharedValue) and shared.holder == "tcp://a"
    again, _ = direct_arguments(((shared,), {}), "tcp://a")
    other, _ = direct_arguments(((1, shared), {}), "tcp://b")
    assert again[0][0] == SharedRef(shared.key, "tcp://a")
    assert other[0] == (1, SharedRef(shared.key, "tcp://a"))
    sent_again = inline(other, values)  # what goes when the holder is gone
    assert isinstance(sent_again[0][1], SharedValue) and sent_again[0][1].value is shared.value
    with pytest.raises(TypeError, match="not inside other objects"):
        hrl.Engine.share(1).__reduce__()


def test_a_worker_that_may_not_hold_a_shared_value_gets_it_whole_and_holds_it_for_none():
    shared = Shared(np.arange(3))
    frozen, _ = direct_arguments(((shared,), {}), "tcp://frozen", may_hold=False)
    assert isinstance(frozen[0][0], SharedValue) and shared.holder is None
    first, _ = direct_arguments(((shared,), {}), "tcp://a")
    later, _ = direct_arguments(((shared,), {}), "tcp://frozen", may_hold=False)
    assert isinstance(first[0][0], SharedValue) and shared.holder == "tcp://a"
    assert later[0][0] == SharedRef(shared.key, "tcp://a")  # it fetches it once it runs


@pytest.mark.cluster
def test_direct_and_scheduled_calls_keep_one_order(engine):
    counter = engine.create_worker(tasks.Counter, start=0)  # snapshots after calls, too
    refs = [counter.call("add", 1, direct=i % 3 == 0) for i in range(30)]
    assert engine.gather(refs, timeout=30) == list(range(1, 31))
    assert [r.direct_call for r in refs[:3]] == [True, False, False]
    told = engine.story(refs[0])  # a direct call's worker tells its half
    assert "direct call received" in told and "answered OK" in told
    deadline = time.monotonic() + 10  # durations arrive with the workers' batched reports
    while engine.stats()["by_name"].get("Counter.add", {}).get("count", 0) < 30:
        assert time.monotonic() < deadline, "direct calls' durations were not recorded"
        time.sleep(0.05)
    counter.kill()


@pytest.mark.cluster
def test_a_direct_call_raises_what_the_method_raised_and_later_calls_go_on(engine):
    box = engine.create_worker(tasks.Box)
    with pytest.raises(AttributeError, match="has no method 'nope'"):
        box.call("nope", direct=True).result(timeout=30)
    assert box.call("put", 3, direct=True).result(timeout=30) is True
    assert box.call("get").result(timeout=30) == 3
    box.kill()


@pytest.mark.cluster
def test_direct_calls_take_values_and_their_results_stay_in_the_driver(engine):
    box = engine.create_worker(tasks.Box)
    with pytest.raises(TypeError, match="TaskRefs of direct calls, not 'inc'"):
        box.call("put", engine.submit(tasks.inc, 1), direct=True)
    with pytest.raises(TypeError, match="keep=True is for direct calls"):
        box.call("get", keep=True)
    answer = box.call("get", direct=True)
    assert answer.result(timeout=30) is None
    with pytest.raises(TypeError, match="was a direct call"):
        engine.submit(tasks.inc, answer)
    assert box.call("put", engine.share(7)).result(timeout=30) is True  # scheduled: the value
    assert box.call("get", direct=True).result(timeout=30) == 7
    box.kill()


def kept_on_workers(engine) -> dict:
    def kept(dask_worker):
        from hrl_tasks.scheduler.runtime import WorkerRuntime

        service = WorkerRuntime.of(dask_worker).task_service
        return 0 if service is None else len(service.kept)

    return engine.client.run(kept)


@pytest.mark.cluster
def test_a_kept_result_goes_from_worker_to_worker_and_is_let_go_with_its_last_ref(engine):
    source, sink = [engine.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    assert source.ready().address != sink.ready().address
    before = sum(kept_on_workers(engine).values())
    weights = {"w": np.arange(1_000, dtype=np.float32)}  # small: kept because asked
    assert source.call("put", weights, direct=True).result(timeout=30) is True
    kept = source.call("get", direct=True, keep=True)
    engine.wait([kept], timeout=30)
    assert type(kept.outcome.result()).__name__ == "Kept"  # not in the driver
    assert kept_on_workers(engine)[source.address] == before + 1
    assert sink.call("put", {"from": kept}, direct=True).result(timeout=30) is True
    got = sink.call("get", direct=True).result(timeout=30)
    np.testing.assert_array_equal(got["from"]["w"], weights["w"])
    np.testing.assert_array_equal(kept.result(timeout=30)["w"], weights["w"])  # fetched
    same = source.call("put", kept, direct=True)  # on its own worker: taken from there
    assert same.result(timeout=30) is True
    del kept, same
    gc.collect()
    deadline = time.monotonic() + 10
    while sum(kept_on_workers(engine).values()) > before:
        assert time.monotonic() < deadline, "the kept result was not let go"
        time.sleep(0.05)
    for box in (source, sink):
        box.kill()


@pytest.mark.cluster
def test_a_direct_call_waits_for_the_direct_calls_it_takes_and_fails_with_a_failed_one(engine):
    source, sink = [engine.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    assert source.call("put", np.arange(50_000), direct=True).result(timeout=30) is True
    pending = source.call("get", direct=True, keep=True)
    taken = sink.call("put", pending, direct=True)  # sent once ``pending`` is done
    assert taken.result(timeout=30) is True
    np.testing.assert_array_equal(
        sink.call("get", direct=True).result(timeout=30), np.arange(50_000)
    )
    failing = source.call("nope", direct=True, keep=True)
    with pytest.raises(hrl.InputFailedError, match="its input 'Box.nope' failed") as info:
        sink.call("put", failing, direct=True).result(timeout=30)
    assert isinstance(info.value.__cause__, AttributeError)
    assert sink.call("put", 3, direct=True).result(timeout=30) is True  # its turn was skipped
    assert sink.call("get", direct=True).result(timeout=30) == 3
    for box in (source, sink):
        box.kill()


@pytest.mark.cluster
def test_a_call_whose_kept_input_died_fails_as_lost_and_later_calls_go_on():
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        source, sink = [engine.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
        assert source.ready().address != sink.ready().address
        kept = source.call("get", direct=True, keep=True)
        engine.wait([kept], timeout=30)
        os.kill(engine.client.run(os.getpid)[source.address], signal.SIGKILL)
        with pytest.raises(hrl.WorkerLostError, match="lost with its worker"):
            sink.call("put", kept, direct=True).result(timeout=60)
        assert sink.call("put", 5, direct=True).result(timeout=30) is True
        assert sink.call("get", direct=True).result(timeout=30) == 5


@pytest.mark.cluster
def test_a_shared_value_reaches_every_worker_from_the_first(engine):
    boxes = [engine.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    assert len({b.ready().address for b in boxes}) == 2
    weights = {"w": np.arange(20_000, dtype=np.float32)}
    shared = engine.share(weights)
    assert engine.gather([b.call("put", shared, direct=True) for b in boxes], timeout=30) == [
        True,
        True,
    ]
    assert shared.holder == boxes[0].address
    for got in engine.gather([b.call("get", direct=True) for b in boxes], timeout=30):
        np.testing.assert_array_equal(got["w"], weights["w"])
    for box in boxes:
        box.kill()


@pytest.mark.cluster
def test_calls_use_the_engine_and_worker_local_from_the_worker(engine):
    nester = engine.create_worker(tasks.Nester)
    assert nester.call("nested_inc", 1, direct=True).result(timeout=30) == 2
    assert nester.call("where", direct=True).result(timeout=30) == nester.address
    tables = engine.gather([nester.call("table", direct=d) for d in (True, False)], timeout=30)
    assert tables[0] == tables[1]  # one worker_local object per process, either way
    nester.kill()


@pytest.mark.cluster
def test_reaching_the_workers_is_checked_once(engine):
    assert engine.reaches_workers()
    other = hrl.Engine(engine.client, owns_client=False)
    try:
        other.nthreads["tcp://127.0.0.1:9"] = 1  # a worker nobody listens for
        assert not other.reaches_workers(timeout=5)
        other.nthreads.pop("tcp://127.0.0.1:9")
        assert not other.reaches_workers()  # remembered
    finally:
        other.close()


@pytest.mark.cluster
def test_a_peer_asking_for_a_value_its_holder_dropped_gets_it_from_the_driver_at_once(engine):
    boxes = [engine.create_worker(tasks.Box, strategy="spread") for _ in range(2)]
    assert len({b.ready().address for b in boxes}) == 2
    first = engine.share({"w": np.arange(1000, dtype=np.float32)})
    assert boxes[0].call("put", first, direct=True).result(timeout=30) is True
    for i in range(8):  # the holder keeps the newest few shared values: the first goes
        newer = engine.share({"w": np.full(10, i, dtype=np.float32)})
        assert boxes[0].call("put", newer, direct=True).result(timeout=30) is True
    start = time.monotonic()
    assert boxes[1].call("put", first, direct=True).result(timeout=60) is True
    assert time.monotonic() - start < 10  # not the peers' 30-s wait for a value to arrive
    got = boxes[1].call("get", direct=True).result(timeout=30)
    np.testing.assert_array_equal(got["w"], np.arange(1000, dtype=np.float32))
    for box in boxes:
        box.kill()


async def calls_out_of_order(obj_id: str, n: int, dask_worker=None) -> list:
    """Runs on the object's worker: direct calls numbered after the last one made,
    all but the first arriving before it (as calls on several connections can)."""
    from hrl_tasks.scheduler.runtime import WorkerRuntime
    from hrl_tasks.scheduler.worker_objects import entry_of, run_call

    runtime = WorkerRuntime.of(dask_worker)
    first = entry_of(obj_id, runtime).watermark + 1

    def call(seq):
        spec = {"key": f"out-of-order-{seq}", "name": "Counter.add", "attempt": 0,
                "topic": "unheard", "internal": True, "quiet": True}  # fmt: skip
        return run_call(runtime, spec, (obj_id, seq, "add", (1,), {}))

    early = [asyncio.ensure_future(call(seq)) for seq in range(first + 1, first + n)]
    await asyncio.sleep(0.3)  # each waits for the calls before it
    replies = await asyncio.wait_for(asyncio.gather(call(first), *early), 20)
    return [(status, value) for status, value, _ in replies]


@pytest.mark.cluster
def test_direct_calls_that_arrive_early_wait_without_holding_the_objects_threads(engine):
    counter = engine.create_worker(tasks.Counter, start=0)
    assert counter.call("add", 1, direct=True).result(timeout=30) == 1
    n = DIRECT_THREADS + 4  # more early calls than the object has threads
    replies = engine.client.run(calls_out_of_order, counter.obj_id, n, workers=[counter.address])[
        counter.address
    ]
    assert replies == [("OK", 1 + i) for i in range(1, n + 1)]  # each in its turn
    counter.kill()


def direct_threads(obj_id: str) -> int:
    import threading

    return sum(t.name.startswith(f"hrl-direct-{obj_id}") for t in threading.enumerate())


@pytest.mark.cluster
def test_an_object_whose_calls_run_one_at_a_time_keeps_one_direct_call_thread(engine):
    counter = engine.create_worker(tasks.Counter, start=0)
    counter.ready()
    # Threads switch at every chance, as in a worker whose other threads run envs: a
    # call handed over before the last one's thread is back finds no idle thread.
    interval = engine.client.run(switch_often, workers=[counter.address])[counter.address]
    try:
        for _ in range(10):  # bursts in flight at once: each call handed over as the last ends
            refs = [counter.call("add", 1, direct=True) for _ in range(40)]
            engine.gather(refs, timeout=30)
    finally:
        engine.client.run(sys.setswitchinterval, interval, workers=[counter.address])
    assert counter.call("value", direct=True).result(timeout=30) == 400
    threads = engine.client.run(direct_threads, counter.obj_id, workers=[counter.address])
    assert threads == {counter.address: 1}
    counter.kill()


def switch_often() -> float:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    return interval


def reported_keys(engine) -> set:
    """Keys of the start and end reports that reached the scheduler on the engine's topic."""
    events = engine.client.get_events(engine.topic)
    return {report[1] for _, reports in events for report in reports}


@pytest.mark.cluster
def test_a_direct_call_speculation_does_not_follow_reports_its_time_in_its_reply(engine):
    counter = engine.create_worker(tasks.Counter, start=0)
    counter.ready()
    before = engine.stats()["by_name"].get("Counter.add", {}).get("count", 0)
    refs = [counter.call("add", 1, direct=True) for _ in range(20)]
    assert engine.gather(refs, timeout=30) == list(range(1, 21))
    # Recorded as the replies came, without waiting for the workers' report batches.
    assert engine.stats()["by_name"]["Counter.add"]["count"] == before + 20
    time.sleep(0.3)  # a report batch leaves a worker within 0.05 s
    assert not {ref.key for ref in refs} & reported_keys(engine)
    counter.kill()


@pytest.mark.cluster
def test_a_speculative_direct_call_reports_its_start_unless_it_ended_first(engine):
    group = engine.create_group(tasks.Sampler, 2)
    for member in group:
        member.ready()
    # Short calls end before their start reports leave (a batch every 0.05 s), but
    # under a loaded machine's delays one may not: of five, at least one must.
    shorts = [group[0].call("sample", 0.0, speculative=True, direct=True) for _ in range(5)]
    engine.gather(shorts, timeout=30)
    call = group[0].call("sample", 0.3, speculative=True, direct=True)
    call.result(timeout=30)
    deadline = time.monotonic() + 10
    while call.key not in reported_keys(engine):  # its start left while it ran
        assert time.monotonic() < deadline, "the speculative call's start was never reported"
        time.sleep(0.05)
    # A short one that ended before its start report left: both were taken back.
    assert {short.key for short in shorts} - reported_keys(engine)
    group.kill()


@pytest.mark.cluster
def test_five_thousand_direct_calls_in_flight_each_run_once_in_order(engine):
    """Calls sent without waiting travel on the worker's one stream, batched: none
    waits for a connection of its own, and none is taken for a lost worker."""
    n = 500 if validating(None) else 5000  # a check of the whole state per event: n^2
    counter = engine.create_worker(tasks.Counter, start=0)
    counter.ready(timeout=30)
    refs = [counter.call("add", 1, direct=True) for _ in range(n)]
    assert engine.gather(refs, timeout=120) == list(range(1, n + 1))
    assert counter.restarts == 0 and engine.stats()["workers_lost"] == 0
    assert counter.call("add", 0, direct=True).result(timeout=30) == n
    counter.kill()


@pytest.mark.cluster
def test_a_direct_call_whose_arguments_do_not_pickle_fails_with_that(engine):
    counter = engine.create_worker(tasks.Counter, start=0)
    with pytest.raises(TypeError, match="call's arguments cannot be sent to the worker"):
        counter.call("add", threading.Lock(), direct=True).result(timeout=30)
    assert counter.call("add", 2, direct=True).result(timeout=30) == 2  # the object goes on
    counter.kill()


@pytest.mark.cluster
def test_a_direct_call_whose_stream_breaks_while_its_worker_runs_on_fails_and_the_object_stays(
    engine,
):
    """A broken connection is not a dead worker: the call fails with the connection's
    error (it may have run), the object is not made again, and calls go on."""
    counter = engine.create_worker(tasks.Counter, start=0)
    assert counter.call("add", 1, direct=True).result(timeout=30) == 1
    slow = counter.call("slow_add", 1, 1.0, direct=True)
    time.sleep(0.3)
    channel = engine.backend.streams.channels[counter.address]
    engine.client.loop.add_callback(channel.stream.abort)  # the engine's end of the stream
    with pytest.raises(ConnectionError, match="the worker still runs"):
        slow.result(timeout=30)
    assert counter.restarts == 0 and engine.stats()["workers_lost"] == 0
    assert counter.call("add", 1, direct=True).result(timeout=30) == 3  # the slow add ran
    counter.kill()


@pytest.mark.cluster
def test_a_closed_task_stream_leaves_no_writer_waiting(engine):
    """A stream's writer waits for messages to write: closing the stream ends it (it
    waited on, and was destroyed pending when the event loop stopped)."""
    counter = engine.create_worker(tasks.Counter, start=0)
    assert counter.call("add", 1, direct=True).result(timeout=30) == 1
    channel = engine.backend.streams.channels[counter.address]
    engine.client.loop.add_callback(channel.close)
    deadline = time.monotonic() + 10
    while not channel.writer.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert channel.closed and channel.writer.cancelled()
    assert counter.call("add", 1, direct=True).result(timeout=30) == 2  # a new stream
    counter.kill()


def test_calls_waiting_for_their_turn_are_woken_in_order_whatever_order_calls_end():
    """Each waiter wakes once every call before it has ended, and only then."""
    from hrl_tasks.scheduler.worker_objects import ObjectEntry

    async def scenario():
        entry = ObjectEntry("echo")
        entry.mark_finished(0)  # the object's creation
        waits = {seq: asyncio.ensure_future(entry.until_turn(seq)) for seq in range(2, 40)}
        await asyncio.sleep(0)
        woken = []
        ends = list(range(1, 39))
        np.random.default_rng(0).shuffle(ends)
        for seq in ends:
            entry.mark_finished(seq)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            ready = sorted(s for s, w in waits.items() if w.done() and s not in woken)
            assert all(s - 1 <= entry.watermark for s in ready)
            woken += ready
            pending = [s for s, w in waits.items() if not w.done()]
            assert all(s - 1 > entry.watermark for s in pending)
        assert sorted(woken) == list(range(2, 40))
        await entry.until_turn(5)  # its turn has passed: returns at once

    asyncio.run(scenario())


def test_thousands_of_direct_calls_in_flight_to_one_object_run_in_order(engine):
    n = 300 if validating(None) else 3000  # a check of the whole state per event: n^2
    counter = engine.create_worker(tasks.Counter)
    refs = [counter.call("add", 1, direct=True) for _ in range(n)]
    assert engine.gather(refs) == list(range(1, n + 1))
