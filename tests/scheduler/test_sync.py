import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks
from tests.scheduler.conformance import CallConformance, EngineConformance


class TestSyncEngine(EngineConformance):
    @pytest.fixture
    def eng(self):
        with hrl.SyncEngine() as engine:
            yield engine


class TestSyncEngineCalls(CallConformance):
    route = None  # one process: no routes

    @pytest.fixture
    def eng(self):
        with hrl.SyncEngine() as engine:
            yield engine


def test_nested_tasks_use_the_same_engine():
    with hrl.SyncEngine() as engine:
        assert engine.submit(tasks.tree, 3, 3).result() == 27
        assert hrl.current_engine() is engine


def test_broken_factory_raises_at_creation():
    with hrl.SyncEngine() as engine, pytest.raises(hrl.ObjectStartError, match="exploded"):
        engine.create_worker(tasks.Broken)


def test_named_tuples_reach_tasks_as_they_were_sent():
    from typing import NamedTuple

    class Point(NamedTuple):
        x: int
        y: tuple

    with hrl.SyncEngine() as engine:
        point = Point(1, (2, 3))
        assert engine.submit(lambda p: p, point).result() == point
        assert type(engine.submit(lambda p: p, [point]).result()[0]) is Point
