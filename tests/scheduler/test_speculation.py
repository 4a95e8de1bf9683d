"""Pure speculation decisions, on a fake clock."""

import pytest

from hrl_tasks.scheduler.speculation import (
    Backup,
    Copy,
    SpecTask,
    SpeculationPolicy,
    WorkerSpeed,
    plan_backups,
    straggling_for,
)

POLICY = SpeculationPolicy(
    multiplier=2.0, quantile=0.5, min_samples=3, min_elapsed_s=0.05, max_backups=1
)
DURATIONS = {"rollout": [0.1, 0.1, 0.1, 0.1]}  # threshold 0.2 s


def task(task_id, *copies, name="rollout", policy=POLICY, allowed=None):
    return SpecTask(task_id, name, tuple(copies), policy, allowed)


def running(worker, started_at):
    return Copy(worker, started_at, submitted_at=0.0)


def test_threshold_needs_samples():
    assert POLICY.threshold([0.1, 0.1]) is None
    assert POLICY.threshold([0.1, 0.1, 0.4]) == pytest.approx(0.2)
    assert SpeculationPolicy(min_elapsed_s=1.0, min_samples=1).threshold([0.01]) == 1.0


def test_too_few_samples_means_no_backup():
    straggler = task("t", running("a", 0.0))
    assert plan_backups(10.0, [straggler], {"rollout": [0.1, 0.1]}, {"b": 1}) == []


def test_straggler_gets_a_backup_on_another_free_worker():
    slow = task("t", running("a", 0.0))
    assert plan_backups(0.25, [slow], DURATIONS, {"a": 1, "b": 1}) == [Backup("t", "b")]


def test_not_late_yet():
    assert plan_backups(0.19, [task("t", running("a", 0.0))], DURATIONS, {"b": 1}) == []


def test_all_workers_busy_means_no_backup_without_queue_on_busy():
    policy = SpeculationPolicy(multiplier=2.0, min_samples=3, queue_on_busy=False)
    slow = task("t", running("a", 0.0), policy=policy)
    assert plan_backups(5.0, [slow], DURATIONS, {"a": 0, "b": 0}) == []


def test_every_thread_over_full_means_no_backup():
    slow = task("t", running("a", 0.0))
    assert plan_backups(5.0, [slow], DURATIONS, {"a": 0, "b": -1}) == []


def test_never_more_than_max_backups():
    two = task("t", running("a", 0.0), running("b", 0.1))
    assert plan_backups(9.0, [two], DURATIONS, {"c": 1}) == []


def test_a_slow_backup_can_be_backed_up_when_allowed():
    policy = SpeculationPolicy(multiplier=2.0, min_samples=3, max_backups=2)
    two = task("t", running("a", 0.0), running("b", 0.3), policy=policy)
    # the youngest copy (backup on b) started at 0.3: not late until 0.5
    assert plan_backups(0.45, [two], DURATIONS, {"c": 1}) == []
    assert plan_backups(0.55, [two], DURATIONS, {"c": 1}) == [Backup("t", "c")]


def test_queued_copy_counts_from_submission():
    queued = task("t", Copy(worker=None, started_at=None, submitted_at=1.0))
    assert straggling_for(queued, 0.2, 1.1) is None
    assert plan_backups(1.3, [queued], DURATIONS, {"b": 1}) == [Backup("t", "b")]


def test_longest_straggler_first_and_one_slot_each():
    older = task("old", running("a", 0.0))
    newer = task("new", running("a", 0.5))
    assert plan_backups(1.0, [newer, older], DURATIONS, {"b": 1}) == [Backup("old", "b")]
    both = plan_backups(1.0, [newer, older], DURATIONS, {"b": 1, "c": 1})
    assert sorted(b.task_id for b in both) == ["new", "old"]
    assert {b.worker for b in both} == {"b", "c"}


def test_slow_workers_and_allowed_peers_are_respected():
    slow = task("t", running("a", 0.0))
    assert plan_backups(1.0, [slow], DURATIONS, {"b": 1}, slow={"b"}) == []
    peer_only = task("t", running("a", 0.0), allowed=frozenset({"c"}))
    assert plan_backups(1.0, [peer_only], DURATIONS, {"b": 1, "c": 1}) == [Backup("t", "c")]


def test_worker_speed_marks_a_persistently_slow_worker_then_forgives():
    policy = SpeculationPolicy(slow_factor=3.0, slow_min_samples=3, slow_cooldown_s=10.0)
    speed = WorkerSpeed(policy)
    for t in range(2):
        speed.record("w", 1.0, typical=0.1, now=t)
    assert speed.slow(2.0) == set()
    speed.record("w", 1.0, typical=0.1, now=2.0)
    assert speed.slow(2.0) == {"w"}
    assert speed.slow(12.5) == set()


def test_one_transient_straggler_does_not_mark_a_worker():
    speed = WorkerSpeed(SpeculationPolicy(slow_min_samples=2))
    for duration in [0.1, 1.0, 0.1, 0.1, 1.0]:
        speed.record("w", duration, typical=0.1, now=0.0)
    assert speed.slow(0.0) == set()


def test_policy_validation_and_coercion():
    assert SpeculationPolicy.coerce(False) is None
    assert SpeculationPolicy.coerce(True) == SpeculationPolicy()
    with pytest.raises(TypeError):
        SpeculationPolicy.coerce("yes")
    with pytest.raises(ValueError):
        SpeculationPolicy(multiplier=0.5)


def test_queue_on_busy_puts_a_backup_behind_one_running_task():
    policy = SpeculationPolicy(min_samples=3, queue_on_busy=True)
    slow = task("t", running("a", 0.0), policy=policy)
    assert plan_backups(1.0, [slow], DURATIONS, {"a": 0, "b": 0, "c": -1}) == [Backup("t", "b")]


def test_a_queued_backup_goes_behind_the_task_that_should_end_soonest():
    slow = task("t", running("a", 0.0))
    since = {"b": 0.85, "c": 0.9, "d": 0.2}  # d's task is past the threshold itself
    busy = {"b": 0, "c": 0, "d": 0}
    assert plan_backups(1.0, [slow], DURATIONS, busy, busy_since=since) == [Backup("t", "b")]


def test_a_copy_still_queued_goes_only_to_an_idle_thread():
    queued = task("t", Copy(None, None, submitted_at=0.0))
    assert plan_backups(1.0, [queued], DURATIONS, {"a": 0, "b": 0}) == []
    assert plan_backups(1.0, [queued], DURATIONS, {"a": 0, "b": 1}) == [Backup("t", "b")]


def test_a_queued_backup_may_get_one_more_copy():
    stuck = task("t", running("a", 0.0), Copy("b", None, submitted_at=0.3))
    assert plan_backups(0.7, [stuck], DURATIONS, {"c": 1}) == [Backup("t", "c")]
    three = task("t", running("a", 0.0), Copy("b", None, 0.3), Copy("c", None, 0.6))
    assert plan_backups(2.0, [three], DURATIONS, {"d": 1}) == []
