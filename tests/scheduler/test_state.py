"""The engine's state machine, fed events on a fake clock: exact state and instructions.

No cluster: each test is a sequence of events and what must come out.
"""

import concurrent.futures as cf

import pytest

from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.errors import ObjectStartError, SchedulerLostError, WorkerLostError
from hrl_tasks.scheduler.placement import PIPELINE
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.state import CANCELLED, FINISHED, RECOMPUTE_LIMIT, EngineState, Timings
from hrl_tasks.scheduler.story import dask_record
from hrl_tasks.scheduler.validate import InvalidState

TWO_WORKERS = {"a": (1, {"CPU": 1.0}), "b": (1, {"CPU": 1.0})}
POLICY = SpeculationPolicy(multiplier=2.0, min_samples=3, min_elapsed_s=0.05, max_backups=1)


def make_state(workers=TWO_WORKERS) -> EngineState:
    state = EngineState("p", validate=True)
    state.handle(ev.WorkersSeen(dict(workers)))
    return state


def of(kind, instructions):
    return [i for i in instructions if isinstance(i, kind)]


def launched(instructions):
    return of(ev.Launch, instructions)


# --- plain tasks ----------------------------------------------------------------


def test_a_task_launches_under_its_id_and_resolves_with_that_attempt():
    state = make_state()
    out = state.handle(ev.SubmitTask("t1", "rollout"))
    assert launched(out) == [ev.Launch("t1", "t1", "rollout", 0)]
    out = state.handle(ev.AttemptDone("t1", "finished"))
    assert of(ev.Resolve, out) == [ev.Resolve("t1", "t1")]
    assert of(ev.Forget, out) == [ev.Forget(("t1",))]
    assert state.tasks["t1"].status == FINISHED and not state.attempts
    assert state.stats.counters["submitted"] == 1 and state.stats.counters["finished"] == 1


def test_a_failed_attempt_is_retried_with_a_fresh_key_until_the_budget_is_spent():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "flaky", policy=RetryPolicy(1, retry_on=(OSError,))))
    out = state.handle(ev.AttemptDone("t1", "error", OSError("once")))
    (retry,) = launched(out)
    assert retry.attempt == 1 and retry.key != "t1" and retry.key.startswith("flaky-p")
    out = state.handle(ev.AttemptDone(retry.key, "error", OSError("twice")))
    (fail,) = of(ev.Fail, out)
    assert str(fail.error) == "twice" and not launched(out)
    assert state.stats.counters["retried"] == 1 and state.stats.counters["failed"] == 1


def test_an_exception_not_in_retry_on_fails_at_once():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t", policy=RetryPolicy(3, retry_on=(KeyError,))))
    out = state.handle(ev.AttemptDone("t1", "error", ValueError("bug")))
    assert not launched(out) and isinstance(of(ev.Fail, out)[0].error, ValueError)


def test_a_lost_worker_is_retried_and_then_named():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t", policy=RetryPolicy(0)))
    out = state.handle(ev.AttemptDone("t1", "error", OSError("gone"), worker_lost=True))
    (fail,) = of(ev.Fail, out)
    assert isinstance(fail.error, WorkerLostError) and "no retries left" in str(fail.error)


def test_backoff_waits_through_the_backend():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t", policy=RetryPolicy(2, backoff=0.5, retry_on=(OSError,))))
    out = state.handle(ev.AttemptDone("t1", "error", OSError()))
    assert not launched(out)
    assert of(ev.Later, out) == [ev.Later(0.5, ev.RetryDue("t1", 1))]
    (retry,) = launched(state.handle(ev.RetryDue("t1", 1)))
    assert retry.attempt == 1


def test_a_failed_input_fails_its_dependent_without_running_it():
    state = make_state()
    state.handle(ev.SubmitTask("up", "up", policy=RetryPolicy(0)))
    state.handle(ev.AttemptDone("up", "error", ValueError("upstream")))
    out = state.handle(ev.SubmitTask("down", "down", deps=("up",)))
    assert not launched(out)
    assert str(of(ev.Fail, out)[0].error) == "upstream"


def test_an_input_retried_meanwhile_reruns_the_dependent_not_counted_as_a_retry():
    state = make_state()
    policy = RetryPolicy(1, retry_on=(OSError,))
    state.handle(ev.SubmitTask("up", "up", policy=policy), ev.SubmitTask("down", "down", ("up",)))
    assert state.attempts["down"].inputs == {"up": "up"}
    (up_retry,) = launched(state.handle(ev.AttemptDone("up", "error", OSError())))
    # the dependent fails too (its input was cancelled): it waits for the input's retry
    out = state.handle(ev.AttemptDone("down", "error", cf.CancelledError()))
    assert not launched(out) and not of(ev.Fail, out)
    out = state.handle(ev.AttemptDone(up_retry.key, "finished"))
    (rerun,) = [i for i in launched(out) if i.task_id == "down"]
    assert rerun.inputs == {"up": up_retry.key} and rerun.attempt == 0
    assert state.stats.counters["retried"] == 1  # the input's only


def test_a_finished_result_lost_before_it_was_read_runs_again_a_bounded_number_of_times():
    state = make_state()
    state.handle(ev.PutValue("v"), ev.SubmitTask("t1", "total", deps=("v",)))
    state.handle(ev.AttemptDone("t1", "finished"))
    key, runs = "t1", []
    for _ in range(RECOMPUTE_LIMIT):
        out = state.handle(ev.ResultLost("t1", key))
        (again,) = launched(out)
        assert again.task_id == "t1" and again.key != key and again.inputs == {"v": "v"}
        assert not of(ev.Fail, out) and state.tasks["t1"].status == "pending"
        out = state.handle(ev.AttemptDone(again.key, "finished"))
        assert of(ev.Resolve, out) == [ev.Resolve("t1", again.key)]
        key = again.key
        runs.append(again.key)
    assert len(set(runs)) == RECOMPUTE_LIMIT
    assert state.stats.counters["recomputed"] == RECOMPUTE_LIMIT
    assert state.stats.counters["retried"] == 0  # a lost result is not the task's failure
    (fail,) = of(ev.Fail, state.handle(ev.ResultLost("t1", key)))
    assert isinstance(fail.error, WorkerLostError) and "4 times" in str(fail.error)


def test_a_result_held_by_a_silent_worker_runs_again_on_another():
    state = make_state()  # workers a and b
    state.handle(ev.SubmitTask("t1", "t"))
    state.handle(ev.AttemptDone("t1", "finished"))
    (again,) = launched(state.handle(ev.ResultLost("t1", "t1", away_from="a")))
    assert again.workers == ("b",) and not again.strict  # b, else where there is room
    state.handle(ev.AttemptDone(again.key, "finished"))
    (plain,) = launched(state.handle(ev.ResultLost("t1", again.key)))
    assert plain.workers is None  # lost with its worker: anywhere


def test_a_lost_result_of_a_task_that_is_not_finished_fails_its_new_outcome():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t"))
    (fail,) = of(ev.Fail, state.handle(ev.ResultLost("t1", "t1")))
    assert "it is pending" in str(fail.error)
    (fail,) = of(ev.Fail, state.handle(ev.ResultLost("gone", "gone")))
    assert "not a finished task" in str(fail.error)


def test_cancel_drops_every_copy_and_counts_once():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t"))
    out = state.handle(ev.CancelTask("t1"))
    assert of(ev.Cancel, out) == [ev.Cancel(("t1",))]
    assert isinstance(of(ev.Fail, out)[0].error, cf.CancelledError)
    assert state.handle(ev.CancelTask("t1")) == []
    assert state.stats.counters["cancelled"] == 1


def test_released_tasks_are_forgotten_once_done():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "t"), ev.Released(("t1",)))
    assert "t1" in state.tasks  # still running
    state.handle(ev.AttemptDone("t1", "finished"))
    assert "t1" not in state.tasks and not state.attempts


# --- speculation ------------------------------------------------------------------


def warm(state, name="work", seconds=0.1, n=3):
    for i in range(n):
        key = f"{name}-warm-{i}"
        state.handle(ev.Started(key, "a"), now=0.0)
        state.handle(ev.Ended(key, name, "a", seconds), now=0.0)


def test_a_straggler_gets_a_backup_on_a_free_worker_and_the_first_copy_wins():
    state = make_state()
    warm(state)
    out = state.handle(ev.SubmitTask("t1", "work", speculation=POLICY), now=1.0)
    assert of(ev.Later, out) == [ev.Later(0.02, ev.Tick())]
    state.handle(ev.Started("t1", "a"), now=1.0)
    assert launched(state.handle(ev.Tick(), now=1.1)) == []  # 0.1 s: not late yet
    (backup,) = launched(state.handle(ev.Tick(), now=1.3))
    assert (backup.workers, backup.priority, backup.attempt) == (("b",), 1, 0)
    assert state.tasks["t1"].backups == {backup.key}
    out = state.handle(ev.AttemptDone(backup.key, "finished"), now=1.35)
    assert of(ev.Resolve, out) == [ev.Resolve("t1", backup.key)]
    assert of(ev.Cancel, out) == [ev.Cancel(("t1",))]
    assert state.stats.counters["backup_won"] == 1 and state.stats.counters["speculated"] == 1
    assert "t1" in state.spec.detached  # the loser left its worker's pool
    state.handle(ev.Ended("t1", "work", "a", 2.0, age=0.0), now=3.0)
    assert state.stats.counters["time_saved_s"] == pytest.approx(3.0 - 1.35)


def test_a_worker_that_stopped_reporting_gets_no_new_work_until_it_reports_again():
    """A frozen worker accepts what is sent and runs none of it: backups and direct
    tasks go elsewhere, Dask's tasks are steered away, and a worker known to be slow
    still takes backups when the only other one is silent."""
    state = make_state()
    warm(state)
    state.handle(ev.SubmitTask("t1", "work", speculation=POLICY), now=1.0)  # queued on a
    state.handle(ev.WorkerSilent("a"), now=1.0)
    state.spec.speed.slow_until["b"] = 100.0  # b is known to be slow, a silent: b it is
    (backup,) = launched(state.handle(ev.Tick(), now=1.3))
    assert backup.workers == ("b",)
    (plain,) = launched(state.handle(ev.SubmitTask("t2", "t"), now=1.4))
    assert plain.workers == ("b",) and not plain.strict
    (direct,) = launched(state.handle(ev.SubmitTask("t3", "t", route="direct"), now=1.4))
    assert direct.workers == ("b",)
    assert "a stopped reporting" in "\n".join(state.story("t1"))
    state.handle(ev.WorkerSilent("a", silent=False), now=2.0)
    state.spec.speed.slow_until.clear()
    (anywhere,) = launched(state.handle(ev.SubmitTask("t4", "t"), now=2.0))
    assert anywhere.workers is None


def test_tasks_on_a_worker_that_stopped_reporting_go_elsewhere_unless_they_started():
    """Dask's work stealing moves a queued task to an idle worker, a frozen one too:
    the silent event names the tasks placed there, and those that have not started
    (and the direct-route tasks sent there) are sent again elsewhere, not as retries."""
    state = make_state()
    (queued,) = launched(state.handle(ev.SubmitTask("t1", "t"), now=1.0))
    (running,) = launched(state.handle(ev.SubmitTask("t2", "t"), now=1.0))
    directs = [launched(state.handle(ev.SubmitTask(f"d{i}", "t", route="direct"), now=1.0))[0]
               for i in range(2)]  # fmt: skip
    (direct,) = [d for d in directs if d.workers == ("a",)]
    state.handle(ev.Started(running.key, "a"), now=1.1)
    out = state.handle(ev.WorkerSilent("a", waiting=(queued.key, running.key, "other")), now=4.0)
    cancelled = {k for c in of(ev.Cancel, out) for k in c.keys}
    moved = {launch.task_id: launch for launch in launched(out)}
    assert set(moved) == {"t1", direct.task_id} and cancelled == {queued.key, direct.key}
    assert all(launch.workers == ("b",) for launch in moved.values())
    assert moved["t1"].attempt == queued.attempt and state.stats.counters["retried"] == 0
    assert state.stats.counters["moved_from_silent"] == 2
    state.handle(ev.AttemptDone(moved["t1"].key, "finished"), now=4.5)
    assert state.tasks["t1"].status == FINISHED


def test_no_backup_without_enough_durations_or_a_free_worker():
    state = make_state({"a": (1, {"CPU": 1.0})})
    warm(state)
    state.handle(ev.SubmitTask("t1", "work", speculation=POLICY), now=1.0)
    state.handle(ev.Started("t1", "a"), now=1.0)
    assert launched(state.handle(ev.Tick(), now=5.0)) == []  # the only worker runs it


def test_a_group_call_is_backed_up_on_an_idle_peer_and_adopts_its_result():
    state = make_state()
    state.handle(
        ev.CreateObject("o0", "c0", "S-0", "S"),
        ev.CreateObject("o1", "c1", "S-1", "S"),
        ev.FormGroup(("o0", "o1")),
    )
    state.handle(
        ev.AttemptDone("c0", "finished", value={"has_state": False, "thread_safe": False}),
        ev.AttemptDone("c1", "finished", value={"has_state": False, "thread_safe": False}),
    )
    warm(state, "S.sample")
    state.handle(ev.CallObject("call", "o0", "sample", speculation=POLICY), now=1.0)
    state.handle(ev.Started("call", "a"), now=1.0)
    (backup,) = launched(state.handle(ev.Tick(), now=2.0))
    assert backup.obj_id == "o1" and backup.workers == ("b",) and backup.args_of == "call"
    out = state.handle(ev.AttemptDone(backup.key, "finished"), now=2.1)
    assert ev.Resolve("call", backup.key) in out
    assert ev.Skip("o0", "a", (1,)) in out  # its own copy may never run: later calls go on


# --- stateful objects ------------------------------------------------------------------


def created(state, obj_id="o", task="c", has_state=False, **create):
    out = state.handle(ev.CreateObject(obj_id, task, "Counter", "Counter", **create))
    state.handle(ev.AttemptDone(task, "finished",
                                value={"has_state": has_state, "thread_safe": False}))  # fmt: skip
    return out


def test_an_object_is_placed_holds_its_resources_and_calls_are_numbered():
    state = make_state()
    out = created(state, request={"CPU": 1.0})
    assert of(ev.Supply, out) == [ev.Supply("a", "o", {"CPU": -1.0}, {"CPU": 1.0})]
    (create,) = launched(out)
    assert (create.kind, create.workers, create.seq, create.internal) == ("create", ("a",), 0, True)
    assert state.ledger.held_on("a") == {"CPU": 1.0}
    calls = [launched(state.handle(ev.CallObject(f"k{i}", "o", "add")))[0] for i in range(3)]
    assert [c.seq for c in calls] == [1, 2, 3] and {c.workers for c in calls} == {("a",)}
    assert [c.name for c in calls] == ["Counter.add"] * 3


def test_a_call_of_an_object_with_state_resolves_after_its_snapshot():
    state = make_state()
    created(state, has_state=True)
    state.handle(ev.CallObject("k1", "o", "add"))
    out = state.handle(ev.AttemptDone("k1", "finished"))
    (snap,) = launched(out)
    assert (snap.kind, snap.seq, snap.fetch) == ("snapshot", 2, True) and not of(ev.Resolve, out)
    out = state.handle(ev.AttemptDone(snap.key, "finished", value={"count": 1}))
    assert ev.Resolve("k1", "k1") in out
    assert state.objects["o"].snapshot == {"count": 1}


def test_a_lost_worker_moves_the_object_and_fails_the_call_that_may_have_run():
    state = make_state()
    created(state, has_state=True)
    state.handle(ev.CallObject("running", "o", "slow"), ev.CallObject("queued", "o", "add"))
    out = state.handle(ev.WorkersSeen({"b": TWO_WORKERS["b"]}))
    (fail,) = of(ev.Fail, out)
    assert fail.task_id == "running" and "reissue_calls" in str(fail.error)
    create, queued = launched(out)
    assert (create.kind, create.workers, create.seq) == ("create", ("b",), 3)
    assert (queued.task_id, queued.workers, queued.seq, queued.attempt) == ("queued", ("b",), 4, 1)
    assert state.objects["o"].restarts == 1 and state.objects["o"].address == "b"


def test_reissue_calls_runs_the_call_in_flight_again():
    state = make_state()
    created(state, reissue_calls=True)
    state.handle(ev.CallObject("running", "o", "slow"))
    out = state.handle(ev.AttemptDone("running", "error", OSError(), worker_lost=True))
    assert not of(ev.Fail, out)
    assert [(i.kind, i.task_id) for i in launched(out)][1] == ("call", "running")


def test_a_late_failure_from_a_replaced_incarnation_does_not_move_the_object_again():
    state = make_state({**TWO_WORKERS, "c": (1, {"CPU": 1.0})})
    created(state, reissue_calls=True)
    state.handle(ev.CallObject("k1", "o", "slow"))
    out = state.handle(ev.WorkersSeen({"b": TWO_WORKERS["b"], "c": (1, {"CPU": 1.0})}))
    (_, again) = launched(out)
    home = state.objects["o"].address
    # the old attempt's failure arrives afterwards: it is not the live copy any more
    out = state.handle(ev.AttemptDone("k1", "error", OSError(), worker_lost=True))
    assert out == [ev.Forget(("k1",))] and again.key != "k1"
    assert state.objects["o"].address == home and state.objects["o"].restarts == 1


def test_an_object_out_of_restarts_is_gone_and_so_are_later_calls():
    state = make_state()
    created(state, max_restarts=0)
    state.handle(ev.WorkersSeen({"b": TWO_WORKERS["b"]}))
    out = state.handle(ev.CallObject("late", "o", "get"))
    assert isinstance(of(ev.Fail, out)[0].error, WorkerLostError)
    assert "max_restarts" in str(of(ev.Fail, out)[0].error)


def test_an_object_waits_for_room_and_takes_it_when_freed():
    state = make_state({"a": (1, {"CPU": 1.0})})
    created(state, "first", "c1", request={"CPU": 1.0})
    out = state.handle(ev.CreateObject("second", "c2", "Second", "Second", request={"CPU": 1.0}))
    assert not launched(out) and state.objects["second"].address is None
    queued = state.handle(ev.CallObject("early", "second", "get"))
    assert not launched(queued)
    (destroy,) = launched(state.handle(ev.KillObject("first", "d1")))
    out = state.handle(ev.AttemptDone(destroy.key, "finished"))
    assert ev.Supply("a", "first", {"CPU": 1.0}, {}) in out
    kinds = [(i.kind, i.task_id) for i in launched(out)]
    assert kinds == [("create", "c2"), ("call", "early")]
    assert "first" not in state.objects and state.ledger.held_on("a") == {"CPU": 1.0}


def test_a_request_no_worker_can_meet_ends_the_object_with_a_clear_error():
    state = make_state()
    out = state.handle(ev.CreateObject("o", "c", "Learner", "Learner", request={"GPU": 1.0}))
    (fail,) = of(ev.Fail, out)
    assert isinstance(fail.error, ObjectStartError) and "GPU=1" in str(fail.error)


def test_a_lost_object_waits_for_a_worker_that_declares_its_request_then_times_out():
    # After every process died, the first to join back may not declare its resources yet.
    state = make_state({"a": (1, {"CPU": 1.0})})
    created(state, request={"CPU": 1.0})
    out = state.handle(ev.WorkersSeen({"b": (1, {})}))
    assert not of(ev.Fail, out) and not launched(out)
    assert state.objects["o"].address is None and state.objects["o"].restarts == 1
    (create,) = launched(state.handle(ev.WorkersSeen({"b": (1, {"CPU": 1.0})})))
    assert (create.kind, create.workers) == ("create", ("b",))
    state.handle(
        ev.AttemptDone(create.key, "finished", value={"has_state": False, "thread_safe": False})
    )
    # Lost again, and no worker ever declares it: it ends after placement_timeout.
    state.handle(ev.WorkersSeen({"c": (1, {})}), now=100.0)
    state.handle(ev.Tick(), now=100.0 + state.placement_timeout / 2)
    assert state.objects["o"].gone is None
    state.handle(ev.Tick(), now=101.0 + state.placement_timeout)
    assert "has no worker to run on (waited 31 s" in str(state.objects["o"].gone)


def test_a_cancelled_scheduled_call_is_skipped_on_its_worker():
    state = make_state()
    created(state)
    state.handle(ev.CallObject("k1", "o", "add"))
    out = state.handle(ev.CancelTask("k1"))
    assert ev.Skip("o", "a", (1,)) in out
    assert state.tasks["k1"].status == CANCELLED


# --- orderings the event loop can produce --------------------------------------------


def test_a_dependent_of_an_input_in_back_off_waits_for_its_retry():
    state = make_state()
    policy = RetryPolicy(1, backoff=1.0, retry_on=(OSError,))
    state.handle(ev.SubmitTask("up", "up", policy=policy))
    state.handle(ev.AttemptDone("up", "error", OSError()))  # back-off: no attempt runs
    assert not launched(state.handle(ev.SubmitTask("down", "down", ("up",))))
    (retry,) = launched(state.handle(ev.RetryDue("up", 1)))
    out = state.handle(ev.AttemptDone(retry.key, "finished"))
    (down,) = [i for i in launched(out) if i.task_id == "down"]
    assert down.inputs == {"up": retry.key}


def test_a_call_ending_before_its_creation_reported_waits_for_the_report():
    state = make_state()
    state.handle(ev.CreateObject("o", "c", "Counter", "Counter"), ev.CallObject("k1", "o", "add"))
    out = state.handle(ev.AttemptDone("k1", "finished"))  # the creation's report is late
    assert not of(ev.Resolve, out)
    value = {"has_state": True, "thread_safe": False}
    out = state.handle(ev.AttemptDone("c", "finished", value=value))
    (snap,) = launched(out)  # the object has state: the call waits for a snapshot
    assert snap.kind == "snapshot" and ev.Resolve("k1", "k1") not in out


def test_a_ref_dropped_before_its_task_arrived_is_forgotten_when_done():
    state = make_state()
    state.handle(ev.Released(("t1",)))  # the ref went before its submission was handled
    state.handle(ev.SubmitTask("t1", "t"))
    state.handle(ev.AttemptDone("t1", "finished"))
    assert "t1" not in state.tasks and not state.released_early


def test_speculation_ticks_are_not_held_behind_a_sweep_tick():
    state = make_state()
    created(state)  # a live object: a sweep tick every second
    state.handle(ev.Tick(), now=1.0)
    out = state.handle(ev.SubmitTask("t1", "work", speculation=POLICY), now=1.01)
    assert of(ev.Later, out) == [ev.Later(0.02, ev.Tick())]


def test_a_kill_that_timed_out_gives_the_resources_back():
    state = make_state({"a": (1, {"CPU": 1.0})})
    created(state, request={"CPU": 1.0})
    state.handle(ev.KillObject("o", "d"))
    out = state.handle(ev.AbandonObject("o"))
    assert ev.Supply("a", "o", {"CPU": 1.0}, {}) in out and state.ledger.held_on("a") == {}


def test_an_object_whose_worker_dies_while_it_is_killed_ends_without_waiting():
    state = make_state()
    created(state)
    state.handle(ev.CallObject("k1", "o", "add"), ev.KillObject("o", "d"))
    out = state.handle(ev.WorkersSeen({"b": TWO_WORKERS["b"]}))
    assert ev.Resolve("d", "d") in out and "o" not in state.objects
    assert isinstance(of(ev.Fail, out)[0].error, WorkerLostError)


# --- the scheduler lost -------------------------------------------------------------


def test_losing_the_scheduler_fails_everything_in_flight_and_everything_later():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "rollout"))
    created(state, "o1", "c1")
    state.handle(ev.CallObject("k1", "o1", "train"))
    out = state.handle(ev.SchedulerLost("lost the Dask scheduler at tcp://x:8786"))
    failed = {f.task_id: f.error for f in of(ev.Fail, out)}
    assert set(failed) == {"t1", "k1"}
    assert all(isinstance(e, SchedulerLostError) for e in failed.values())
    assert of(ev.DropObject, out) == [ev.DropObject("o1")] and not state.objects
    later = state.handle(
        ev.SubmitTask("t2", "rollout"),
        ev.CallObject("k2", "o1", "train"),
        ev.CreateObject("o2", "c2", "Worker", "Worker"),
    )
    assert [f.task_id for f in of(ev.Fail, later)] == ["t2", "k2", "c2"]
    assert not launched(later)
    assert "tcp://x:8786" in str(failed["t1"])


# --- data lost with a worker --------------------------------------------------------


def test_a_put_value_lost_with_its_worker_is_sent_again_and_its_user_reruns():
    state = make_state()
    state.handle(ev.PutValue("v"))
    (first,) = launched(state.handle(ev.SubmitTask("t1", "total", deps=("v",))))
    assert first.inputs == {"v": "v"}
    out = state.handle(ev.InputsLost("t1", lost=("v",)))  # Dask cancelled t1 itself
    (resend,) = of(ev.Resend, out)
    (again,) = launched(out)
    assert resend.task_id == "v" and again.inputs == {"v": resend.key} != first.inputs
    assert not of(ev.Fail, out) and state.stats.counters["inputs_resent"] == 1
    (later,) = launched(state.handle(ev.SubmitTask("t2", "total", deps=("v",))))
    assert later.inputs == {"v": resend.key}


def test_an_attempt_cancelled_by_dask_with_no_lost_input_is_cancelled():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "work"))
    out = state.handle(ev.InputsLost("t1"))
    (fail,) = of(ev.Fail, out)
    assert isinstance(fail.error, cf.CancelledError) and not launched(out)


def test_a_call_result_lost_with_its_worker_fails_its_users_at_once():
    state = make_state()
    created(state, "o", "c")
    (call,) = launched(state.handle(ev.CallObject("k", "o", "add")))
    state.handle(ev.AttemptDone("k", "finished"))
    (user,) = launched(state.handle(ev.SubmitTask("u1", "inc", deps=("k",))))
    out = state.handle(ev.WorkersSeen({"b": TWO_WORKERS["b"]}))  # "a", its home, is gone
    failed = {f.task_id: f.error for f in of(ev.Fail, out)}
    assert isinstance(failed["u1"], WorkerLostError) and user.key in of(ev.Cancel, out)[0].keys
    assert "result of 'Counter.add' was lost" in str(failed["u1"])
    out = state.handle(ev.SubmitTask("u2", "inc", deps=("k",)))
    assert [f.task_id for f in of(ev.Fail, out)] == ["u2"] and not launched(out)
    assert call.workers == ("a",)


# --- the state checks itself and tells a task's story ------------------------------


def test_validate_names_a_pending_task_that_nothing_will_end():
    state = make_state()
    state.handle(ev.SubmitTask("t1", "rollout"))
    state.validate()  # an attempt in flight: fine
    del state.attempts["t1"]  # what a lost Dask callback would leave behind
    with pytest.raises(InvalidState, match=r"its attempt t1 is not an attempt of it"):
        state.validate()
    state.tasks["t1"].live.clear()
    with pytest.raises(InvalidState, match=r"t1 \(rollout\) is pending but nothing will end it"):
        state.validate()


def test_validate_checks_the_ledger():
    state = make_state()
    state.handle(ev.CreateObject("o1", "c1", "Learner", "Learner", request={"CPU": 1.0}))
    state.validate()
    state.ledger.acquire("ghost", "a", {"CPU": 1.0})
    with pytest.raises(InvalidState, match="ghost holds resources on a but does not live there"):
        state.validate()
    state.ledger.release("ghost")
    state.ledger.release("o1")
    with pytest.raises(InvalidState, match=r"object o1 lives on \w but holds nothing"):
        state.validate()


def test_a_task_backing_off_or_waiting_for_an_input_is_valid():
    state = make_state()
    state.handle(ev.SubmitTask("in", "producer", policy=RetryPolicy(1, backoff=5.0, retry_on=(OSError,))))  # fmt: skip
    state.handle(ev.SubmitTask("t1", "consumer", deps=("in",)))
    state.handle(ev.AttemptDone("in", "error", OSError("once")))  # validated after each handle
    assert state.tasks["in"].retry_due == pytest.approx(5.0)
    out = state.handle(ev.AttemptDone("t1", "error", OSError("input gone")))
    assert not launched(out) and state.tasks["t1"].waiting_on == {"in"}
    story = "\n".join(state.story("t1"))
    assert "waits for input in (producer)" in story
    assert "waits out a retry's back-off (5.0 s left)" in "\n".join(state.story("in"))


def test_a_dask_story_s_records_are_read_whatever_their_shape():
    transition = ("k", "processing", "memory", {"k2": "waiting"}, "task-finished-1", 12.5)
    assert dask_record(transition) == ("k", "Dask: processing -> memory (task-finished-1)", 12.5)
    on_worker = ("k", "executing", "released", "cancelled", {}, "cancel-1", 4.0)
    assert dask_record(on_worker) == (
        "k",
        "Dask: executing -> released -> cancelled (cancel-1)",
        4.0,
    )
    reached = ("k", "ready", "executing", "executing", {}, "s-2", 5.0)
    assert dask_record(reached)[1] == "Dask: ready -> executing (s-2)"
    assert dask_record(["k", "compute-task", "s-1", 3.0]) == ("k", "Dask: compute-task s-1", 3.0)
    assert dask_record(("k", "no time")) is None and dask_record("k") is None


def test_a_story_tells_attempts_retries_and_where_the_task_is_now():
    state = make_state()
    state.handle(
        ev.SubmitTask("t1", "rollout", policy=RetryPolicy(2, retry_on=(OSError,))), now=1.0
    )
    state.handle(ev.Started("t1", "a"), now=1.5)
    out = state.handle(ev.AttemptDone("t1", "error", OSError("boom")), now=2.0)
    (retry,) = launched(out)
    state.handle(ev.WorkerRemoved("a"), now=2.5)
    state.handle(ev.Started(retry.key, "b"), now=3.0)
    lines = state.story("t1")
    text = "\n".join(lines)
    for expected in ("SubmitTask", "Started: on a", "AttemptDone: error: OSError: boom",
                     f"Launch {retry.key}: attempt 1 (task)", "WorkerRemoved: a",
                     f"Started {retry.key}: on b"):  # fmt: skip
        assert expected in text
    assert lines[-1] == f"now: pending after 2 attempts; attempt {retry.key} running on b for 0.0 s"
    state.handle(ev.AttemptDone(retry.key, "finished"), now=4.0)
    assert state.story("t1")[-1] == "now: finished after 2 attempts"


def test_a_plain_task_prefers_workers_an_object_call_is_bound_to_its_own():
    state = make_state()
    state.handle(ev.CreateObject("o1", "c1", "Learner", "Learner"))
    out = state.handle(ev.CallObject("k1", "o1", "step"))
    (call,) = launched(out)
    assert call.strict and call.workers == (state.objects["o1"].address,)
    state.spec.speed.slow_until["a"] = 100.0  # a is known to be slow: speculative work avoids it
    out = state.handle(ev.SubmitTask("t1", "rollout", speculation=POLICY))
    (task,) = launched(out)
    assert task.workers == ("b",) and not task.strict  # Dask may run it elsewhere once b is gone
    assert state.attempts["t1"].pinned is None


# --- the direct route -------------------------------------------------------------


def direct_tasks(state, n, **options):
    out = state.handle(*[ev.SubmitTask(f"t{i}", "t", route="direct", **options) for i in range(n)])
    return launched(out)


def test_the_direct_route_sends_each_worker_its_pipeline_and_queues_the_rest():
    state = make_state()  # a and b, one thread each
    sent = direct_tasks(state, 7)
    assert len(sent) == 2 * PIPELINE
    assert all(s.route == "direct" and s.strict and len(s.workers) == 1 for s in sent)
    assert sorted(len(keys) for keys in state.sent.values()) == [PIPELINE, PIPELINE]
    assert list(state.room) == [f"t{i}" for i in range(2 * PIPELINE, 7)]
    first = sent[0]
    (next_one,) = launched(state.handle(ev.AttemptDone(first.key, "finished")))
    assert next_one.task_id == f"t{2 * PIPELINE}" and next_one.workers == first.workers


def test_a_direct_attempt_on_a_worker_that_left_runs_again_on_another():
    state = make_state()
    (sent,) = direct_tasks(state, 1, policy=RetryPolicy(max_retries=1))
    lost_on = sent.workers[0]
    (again,) = launched(state.handle(ev.WorkerRemoved(lost_on)))
    (other,) = set(TWO_WORKERS) - {lost_on}
    assert again.task_id == "t0" and again.workers == (other,)
    assert not state.sent.get(lost_on)
    # The stream's own report of the loss comes later: nothing more happens.
    late = state.handle(ev.AttemptDone(sent.key, "error", WorkerLostError("x"), worker_lost=True))
    assert not launched(late) and not of(ev.Fail, late)
    (ok,) = of(ev.Resolve, state.handle(ev.AttemptDone(again.key, "finished")))
    assert ok.task_id == "t0"


def test_a_task_cancelled_while_it_waits_for_a_slot_is_never_sent():
    state = make_state()
    direct_tasks(state, 2 * PIPELINE + 1)
    waiting = f"t{2 * PIPELINE}"
    state.handle(ev.CancelTask(waiting))
    assert state.tasks[waiting].status == CANCELLED
    assert not launched(state.handle(ev.AttemptDone(state.tasks["t0"].current, "finished")))
    assert not state.room


def test_a_direct_task_that_asks_for_resources_waits_where_they_fit():
    state = EngineState("p", validate=True)
    state.handle(ev.WorkersSeen({"a": (2, {"GPU": 1.0}), "b": (2, {})}))
    out = state.handle(*[ev.SubmitTask(f"g{i}", "g", request={"GPU": 1.0}, route="direct")
                         for i in range(2)])  # fmt: skip
    (first,) = launched(out)
    assert first.workers == ("a",) and list(state.room) == ["g1"]
    (plain,) = direct_tasks(state, 1)  # a plain task behind it is not held up
    assert plain.task_id == "t0"
    (second,) = launched(state.handle(ev.AttemptDone(first.key, "finished")))
    assert second.task_id == "g1" and second.workers == ("a",)


def test_an_attempt_waiting_for_its_children_leaves_room_for_them():
    state = make_state()
    sent = direct_tasks(state, 2 * PIPELINE + 1)
    parent = sent[0]
    (child,) = launched(state.handle(ev.AttemptWaits(parent.key, True)))
    assert child.task_id == f"t{2 * PIPELINE}"
    state.handle(ev.AttemptWaits(parent.key, False))  # busy again: over the pipeline a while
    assert state._busy(parent.workers[0]) == PIPELINE + (child.workers == parent.workers)


def test_a_waiting_direct_task_lends_its_resources_until_it_ends():
    state = EngineState("p", validate=True)
    state.handle(ev.WorkersSeen({"a": (1, {"CPU": 1.0})}))
    out = state.handle(*[ev.SubmitTask(f"t{i}", "t", request={"CPU": 1.0}, route="direct")
                         for i in range(2)])  # fmt: skip
    (parent,) = launched(out)
    (child,) = launched(state.handle(ev.AttemptWaits(parent.key, True)))
    assert child.task_id == "t1"
    state.handle(ev.AttemptWaits(parent.key, False))  # lent until it ends, as on Dask's route
    assert state.sent_requests["a"] == {"CPU": 1.0}  # the child's only
    state.handle(ev.AttemptDone(child.key, "finished"), ev.AttemptDone(parent.key, "finished"))
    assert state.sent_requests["a"] == {"CPU": 0.0}


def test_a_put_to_a_worker_that_just_died_is_tried_again_longer_each_time_then_given_up():
    timings = Timings(place_tries=3, place_retry_s=0.2)
    waits = [timings.place_retry_after(tries) for tries in (1, 2, 3)]
    assert waits[:2] == pytest.approx([0.2, 0.4]) and waits[2] is None
    assert EngineState().timings == Timings()  # the engine's own, unless told otherwise
