"""TaskRef bookkeeping of copies, without a cluster (a fake engine records what it is told)."""

import concurrent.futures as cf

import pytest

from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.taskref import TaskRef


class FakeFuture:
    def __init__(self, key):
        self.key = key


class FakeSpeculator:
    def __init__(self):
        self.finished = []

    def on_finished(self, ref, winner, losers):
        self.finished.append((winner, sorted(losers)))


class FakeEngine:
    def __init__(self):
        self.cancelled = []
        self.watched = []
        self._attempts = {}
        self.speculator = FakeSpeculator()

    def cancel_futures(self, futures):
        self.cancelled += [f.key for f in futures]

    def watch(self, future):
        self.watched.append(future.key)

    def _note_cancelled(self, ref):
        pass


def make_ref(engine):
    keys = iter(f"k{i}" for i in range(100))
    ref = TaskRef(engine, "t", lambda attempt: (FakeFuture(next(keys)), {}), [])
    ref.speculation = SpeculationPolicy()
    return ref


def test_finished_while_its_backup_is_launched_cancels_the_backup():
    engine = FakeEngine()
    ref = make_ref(engine)
    ref._start_attempt(0)
    original = ref.future
    assert ref._finish(original)
    ref._start_attempt(1, (FakeFuture("late-backup"), {}), backup=True)
    assert "late-backup" in engine.cancelled
    assert ref._outcome.result() is original
    assert ref.attempts == 1  # the late backup never became a copy


def test_backup_wins_and_the_original_is_cancelled():
    engine = FakeEngine()
    ref = make_ref(engine)
    ref._start_attempt(0)
    ref._start_attempt(1, (FakeFuture("backup"), {}), backup=True)
    backup = ref.future
    assert ref._finish(backup)
    assert engine.cancelled == ["k0"]
    assert engine.speculator.finished == [("backup", ["k0"])]
    assert not ref._finish(FakeFuture("k0")), "a second winner was accepted"


def test_fail_after_finish_changes_nothing_and_cancel_after_finish_is_false():
    engine = FakeEngine()
    ref = make_ref(engine)
    ref._start_attempt(0)
    ref._finish(ref.future)
    assert not ref._fail(RuntimeError("late"))
    assert not ref.cancel()
    assert ref.exception(timeout=0) is None


def test_cancel_drops_every_copy():
    engine = FakeEngine()
    ref = make_ref(engine)
    ref._start_attempt(0)
    ref._start_attempt(1, (FakeFuture("backup"), {}), backup=True)
    assert ref.cancel()
    assert sorted(engine.cancelled) == ["backup", "k0"]
    with pytest.raises(cf.CancelledError):
        ref._outcome.result()


def test_taskref_refuses_to_be_pickled():
    import pickle

    with pytest.raises(TypeError, match="dependency"):
        pickle.dumps(make_ref(FakeEngine()))
