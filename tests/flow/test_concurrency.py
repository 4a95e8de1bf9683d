"""Concurrently(async) threads and Enqueue stop instead of running or waiting forever."""

import itertools
import queue
import threading
import time

import pytest

from hrl_tasks.flow import Concurrently, Enqueue, LocalIterator


def counting(produced: list):
    for i in itertools.count():
        produced.append(i)
        yield i


def test_async_threads_stop_once_the_consumer_closes_the_iterator():
    produced: list = []
    flow = Concurrently([LocalIterator(counting(produced))], mode="async")
    assert flow.take(3) == [0, 1, 2]
    flow.close()  # as when the algorithm stops
    time.sleep(1.5)  # a pump waiting on the full queue looks every 0.5 s
    count = len(produced)
    time.sleep(1.0)
    assert len(produced) == count, "a pump thread ran on after its consumer closed"
    assert not [t for t in threading.enumerate() if t.name.endswith("(pump)") and t.is_alive()]


def test_a_sub_flow_error_reaches_the_consumer():
    def broken():
        yield 1
        raise RuntimeError("sub-flow broke")

    flow = Concurrently([LocalIterator(broken())], mode="async")
    with pytest.raises(RuntimeError, match="sub-flow broke"):
        flow.take(5)


def test_enqueue_on_a_full_queue_asks_whether_its_consumer_lives():
    full = queue.Queue(maxsize=1)
    full.put("waiting")

    def consumer_is_dead():
        raise RuntimeError("the learner thread died")

    with pytest.raises(RuntimeError, match="learner thread died"):
        Enqueue(full, check=consumer_is_dead)("item")
    with pytest.raises(queue.Full):
        Enqueue(full, block=False)("item")
