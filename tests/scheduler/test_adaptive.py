"""Scaling to the engine's own work: the pure decisions, and the scheduler plugin that
keeps working workers from being retired."""

import types

import pytest

from hrl_tasks.scheduler.adaptive import Bounds, next_target, parse_bounds, wanted_workers
from hrl_tasks.scheduler.downscaling import TOPIC, KeepBusyWorkers


def test_bounds_parse_and_refuse_what_is_not_min_max():
    assert parse_bounds("1:8") == Bounds(1, 8)
    assert parse_bounds("3") == Bounds(3, 3)
    assert parse_bounds("0:2") == Bounds(0, 2)
    for bad in ("a:b", "4:2", "-1:3", "0:0", ""):
        with pytest.raises(ValueError, match="--adapt"):
            parse_bounds(bad)


def test_the_wanted_size_counts_threads_and_stays_within_bounds():
    assert wanted_workers(0, 1, Bounds(1, 8)) == 1
    assert wanted_workers(5, 1, Bounds(1, 8)) == 5
    assert wanted_workers(5, 2, Bounds(1, 8)) == 3  # two threads a worker: ceil(5 / 2)
    assert wanted_workers(50, 1, Bounds(1, 8)) == 8
    assert wanted_workers(0, 1, Bounds(0, 8)) == 0


def test_the_cluster_grows_at_once_and_shrinks_only_after_a_whole_window_of_less():
    assert next_target(2, [2, 2, 5]) == 5
    # A lull between iterations: the window still holds the peak, so nothing shrinks.
    assert next_target(5, [5, 1, 1]) == 5
    # Less for the whole window: down to the most it wanted in it.
    assert next_target(5, [3, 1, 2]) == 3
    assert next_target(3, [3, 3, 3]) == 3


def test_workers_that_work_for_an_engine_are_not_offered_for_retirement():
    plugin = KeepBusyWorkers()
    workers = [types.SimpleNamespace(address=a) for a in ("tcp://a:1", "tcp://b:1", "tcp://c:1")]
    plugin.log_event(TOPIC, {"worker": "tcp://a:1", "busy": True})
    plugin.log_event(TOPIC, {"worker": "tcp://b:1", "busy": True})
    plugin.log_event("another-topic", {"worker": "tcp://c:1", "busy": True})
    assert [ws.address for ws in plugin.valid_workers_downscaling(None, workers)] == ["tcp://c:1"]
    plugin.log_event(TOPIC, {"worker": "tcp://b:1", "busy": False})
    plugin.remove_worker(None, "tcp://a:1")
    assert len(plugin.valid_workers_downscaling(None, workers)) == 3
