import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks
from tests.scheduler.conformance import EngineConformance


class TestSyncEngine(EngineConformance):
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
