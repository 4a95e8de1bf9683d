"""Speculative re-execution on a real cluster with one worker slowed down."""

import time

import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import clear_faults, inject_faults
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster

ROUND = 16
TASK_S = 0.05


@pytest.fixture(scope="module")
def four():
    with hrl.Engine.local(n_workers=4, threads_per_worker=1) as engine:
        yield engine


@pytest.fixture
def slow_worker(four):
    victim = sorted(four.nthreads)[0]
    inject_faults(four, slow_workers={victim: 20.0})
    yield victim
    clear_faults(four)


def bulk_round(engine, speculative=True, name="work"):
    refs = [
        engine.submit(tasks.work, i, TASK_S, speculative=speculative, name=name)
        for i in range(ROUND)
    ]
    return refs, engine.gather(refs, timeout=60)


def test_backups_win_against_a_slow_worker_and_results_are_unchanged(four, slow_worker):
    expected = [i * i for i in range(ROUND)]
    clear_faults(four)
    _, clean = bulk_round(four)  # durations for the planner
    assert clean == expected
    inject_faults(four, slow_workers={slow_worker: 20.0})
    before = four.stats()
    for _ in range(8):
        refs, results = bulk_round(four)
        assert results == expected  # no loss, no duplicates, same values
        if slow_worker in four.slow_workers():
            break
    else:
        pytest.fail("the slow worker was not noticed in 8 rounds")
    after = four.stats()
    assert after["speculated"] > before["speculated"]
    assert after["backup_won"] > before["backup_won"]
    # known to be slow: the next round sends it no work at all
    refs, results = bulk_round(four)
    assert results == expected
    holders = four.client.who_has([r.future for r in refs])
    assert all(slow_worker not in where for where in holders.values())


def test_a_task_not_marked_speculative_is_never_copied(four, slow_worker):
    bulk_round(four, name="plain-warmup")
    before = four.stats()["speculated"]
    refs, results = bulk_round(four, speculative=False, name="plain")
    assert results == [i * i for i in range(ROUND)]
    assert all(r.attempts == 1 and not r.backups for r in refs)
    assert four.stats()["speculated"] == before


@pytest.mark.parametrize("direct", [False, True])
def test_a_group_call_speculates_to_an_idle_peer(four, direct):
    group = four.create_group(tasks.Sampler, 3)
    homes = sorted(h.address for h in group)
    assert len(set(homes)) == 3  # spread
    for _ in range(3):  # durations for the planner
        calls = group.call_all("sample", TASK_S, direct=direct)
        assert sorted(four.gather(calls, timeout=30)) == homes
    straggler = group[0]
    inject_faults(four, slow_workers={straggler.address: 40.0})
    try:
        before = four.stats()["backup_won"]
        call = straggler.call("sample", TASK_S, speculative=True, direct=direct)
        answer = call.result(timeout=30)
        assert answer in set(homes) - {straggler.address}, "the slow member answered"
        deadline = time.monotonic() + 5  # counted just after the result is handed out
        while four.stats()["backup_won"] < before + 1:
            assert time.monotonic() < deadline, "the backup's win was not counted"
            time.sleep(0.01)
        assert four.stats()["backup_won"] == before + 1
        clear_faults(four)
        # the member whose copy lost still takes calls (its skipped turn does not block them)
        assert straggler.call("sample", 0.0, direct=direct).result(timeout=60) == straggler.address
    finally:
        clear_faults(four)
        group.kill()


def test_speculative_call_needs_a_group(four):
    lone = four.create_worker(tasks.Sampler)
    with pytest.raises(ValueError, match="create_group"):
        lone.call("sample", 0.0, speculative=True)
    lone.kill()
