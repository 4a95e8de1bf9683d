"""Flow iterators and operators, in-process (SyncEngine) and on a real cluster."""

import queue
import threading

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.data import SampleBatch
from hrl_tasks.flow import (
    ConcatBatches,
    Concurrently,
    Dequeue,
    Enqueue,
    LocalIterator,
    ParallelIterator,
    StandardizeFields,
)


class Counter:
    """A stand-in shard: each sample is the next number of its own sequence."""

    def __init__(self, start):
        self.n = start

    def sample(self):
        self.n += 1
        return self.n

    def apply(self, fn):
        return fn(self)


def add_start(worker, item):
    return (item, worker.n)


def test_local_verbs():
    it = LocalIterator(range(10)).filter(lambda x: x % 3 == 0).for_each(lambda x: x + 1)
    assert list(it) == [1, 4, 7, 10]
    assert list(LocalIterator([1, 2]).combine(lambda x: [x] * x)) == [1, 2, 2]
    union = LocalIterator([1, 2, 3]).union(LocalIterator("ab"))
    assert list(union) == [1, "a", 2, "b", 3]
    assert LocalIterator(range(100)).take(3) == [0, 1, 2]


def test_parallel_gather_sync_and_async_in_process():
    with hrl.SyncEngine() as engine:
        shards = [engine.create_worker(Counter, s) for s in (0, 100)]
        sync = ParallelIterator(engine, shards, "sample").gather_sync()
        assert sync.take(2) == [[1, 101], [2, 102]]
        pairs = (
            ParallelIterator(engine, shards, "sample").zip_with_source_actor(num_async=2).take(4)
        )
        assert sorted(item for _, item in pairs) == [3, 4, 103, 104]
        assert {id(handle) for handle, _ in pairs} == {id(s) for s in shards}
        # two calls per shard are still in flight (in-process they already ran): 5, 6 and 105, 106
        fused = ParallelIterator(engine, shards, "sample").for_each(add_start).gather_sync()
        assert fused.take(1) == [[(7, 7), (107, 107)]]


def test_concat_batches_waits_for_enough_steps():
    op = ConcatBatches(5)
    batch = SampleBatch({"obs": np.zeros((3, 2)), "rewards": np.ones(3)})
    assert op(batch) == []
    (out,) = op(batch)
    assert len(out) == 6 and op.buffer == []
    with pytest.raises(ValueError):
        ConcatBatches(0)


def test_standardize_fields():
    batch = SampleBatch({"advantages": np.array([1.0, 2.0, 3.0, 6.0])})
    out = StandardizeFields(["advantages"])(batch)
    assert np.isclose(out["advantages"].mean(), 0) and np.isclose(
        out["advantages"].std(), 1, atol=1e-4
    )
    with pytest.raises(KeyError, match="advantages"):
        StandardizeFields(["advantages"])(SampleBatch({"rewards": np.ones(2)}))


def test_concurrently_round_robin_with_weights_and_output_indexes():
    a, b = LocalIterator(iter("aaaaaa")), LocalIterator(iter("bbbbbb"))
    out = Concurrently([a, b], mode="round_robin", round_robin_weights=[2, 1]).take(6)
    assert out == ["a", "a", "b", "a", "a", "b"]
    c, d = LocalIterator(iter(range(10))), LocalIterator(iter("xyz" * 5))
    only_c = Concurrently([c, d], output_indexes=[0]).take(3)
    assert only_c == [0, 1, 2]
    with pytest.raises(ValueError, match="mode"):
        Concurrently([a], mode="random")


def test_duplicate_gives_every_copy_every_item_once_pulled_once():
    pulled = []

    def source():
        for i in range(6):
            pulled.append(i)
            yield i

    a, b = LocalIterator(source()).duplicate(2)
    assert Concurrently([a, b], mode="round_robin").take(12) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert pulled == list(range(6))  # each item was taken from the source once
    assert list(a) == [] and list(b) == []  # the source ended: so do the copies


def test_duplicate_in_threads_holds_a_fast_copy_back_and_lets_go_of_a_closed_one():
    a, b = LocalIterator(iter(range(1000))).duplicate(2, max_buffered=3)
    fast = []
    thread = threading.Thread(target=lambda: fast.extend(a.take(50)), daemon=True)
    thread.start()
    thread.join(timeout=2.0)
    assert thread.is_alive() and len(fast) == 0  # b has 3 waiting: a waits for it
    assert b.take(10) == list(range(10))  # b catches up, a runs on
    b.close()  # b leaves: a no longer waits for it
    thread.join(timeout=10.0)
    assert not thread.is_alive() and fast == list(range(50))
    with pytest.raises(ValueError, match="n >= 1"):
        LocalIterator(iter(())).duplicate(0)


def test_duplicate_refuses_to_wait_for_a_copy_that_the_same_thread_consumes():
    a, b = LocalIterator(iter(range(100))).duplicate(2, max_buffered=2)
    assert next(b) == 0 and a.take(3) == [0, 1, 2]  # b has 1 and 2 waiting
    with pytest.raises(RuntimeError, match="copy 0 is 2 items ahead of copy 1"):
        next(a)


def test_duplicate_in_threads_delivers_every_item_in_order():
    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for _ in range(5):
            copies = LocalIterator(iter(range(300))).duplicate(3, max_buffered=4)
            got = [[] for _ in copies]
            threads = [
                threading.Thread(target=lambda c=c, g=g: g.extend(c))
                for c, g in zip(copies, got, strict=True)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
            assert all(g == list(range(300)) for g in got)
    finally:
        sys.setswitchinterval(interval)


def test_concurrently_async_yields_everything_and_surfaces_errors():
    got = sorted(
        Concurrently([LocalIterator(range(5)), LocalIterator(range(10, 13))], mode="async")
    )
    assert got == [0, 1, 2, 3, 4, 10, 11, 12]

    def broken():
        yield 1
        raise RuntimeError("sub-flow failed")

    with pytest.raises(RuntimeError, match="sub-flow failed"):
        list(Concurrently([LocalIterator(broken())], mode="async"))


def test_enqueue_dequeue_feed_a_learner_thread():
    q = queue.Queue(maxsize=4)
    seen = []

    def learner():
        for item in Dequeue(q).take(5):
            seen.append(item * 2)

    thread = threading.Thread(target=learner)
    thread.start()
    produced = LocalIterator(range(5)).for_each(Enqueue(q)).take(5)
    thread.join(timeout=10)
    assert produced == [0, 1, 2, 3, 4] and seen == [0, 2, 4, 6, 8]


def test_dequeue_check_stops_a_hopeless_wait():
    def learner_died():
        raise RuntimeError("learner thread died")

    with pytest.raises(RuntimeError, match="died"):
        next(Dequeue(queue.Queue(), check=learner_died))


@pytest.mark.cluster
def test_parallel_iterator_on_a_cluster(engine):
    shards = [engine.create_worker(Counter, s) for s in (0, 100)]
    try:
        sync = ParallelIterator(engine, shards, "sample").for_each(add_start).gather_sync()
        assert sync.take(2) == [[(1, 1), (101, 101)], [(2, 2), (102, 102)]]
        items = ParallelIterator(engine, shards, "sample").gather_async(num_async=2).take(6)
        assert len(set(items)) == 6
        assert {x // 100 for x in items} == {0, 1}  # both shards, each in its own order
        for shard_items in ([x for x in items if x < 100], [x for x in items if x >= 100]):
            assert shard_items == sorted(shard_items)
    finally:
        for shard in shards:
            shard.kill()


def test_linear_schedule():
    from hrl_tasks.flow import linear_schedule

    assert linear_schedule(1.0, 0.1, 100, 0) == 1.0
    assert abs(linear_schedule(1.0, 0.1, 100, 50) - 0.55) < 1e-9
    assert abs(linear_schedule(1.0, 0.1, 100, 1000) - 0.1) < 1e-12


def test_replay_waits_for_learning_starts_then_samples():
    from hrl_tasks.data import ReplayBuffer
    from hrl_tasks.flow import Replay, StoreToReplayBuffer

    buffer = ReplayBuffer(100, seed=0)
    replay = Replay(buffer, batch_size=4, learning_starts=8)
    assert next(replay) is None
    StoreToReplayBuffer(buffer)(SampleBatch({"obs": np.arange(10.0), "rewards": np.ones(10)}))
    batch = next(replay)
    assert len(batch) == 4 and set(batch["obs"]) <= set(np.arange(10.0))
