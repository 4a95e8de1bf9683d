"""What the engine keeps stays bounded over a long run: many events, the same sizes.

The state machine is fed the events of thousands of rounds on a fake clock and
its containers are measured after each; the embedded cluster's settings bound
Dask's own histories.
"""

from hrl_tasks.scheduler import events as ev
from hrl_tasks.scheduler.clusters import HeldSettings, local_settings
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.state import RELEASED_EARLY_S, EngineState
from hrl_tasks.scheduler.stats import NAMES_KEPT
from hrl_tasks.scheduler.story import ENDED_ENTRIES, ENDED_KEPT, TASK_ENTRIES

WORKERS = {"a": (1, {"CPU": 1.0}), "b": (1, {"CPU": 1.0})}
ROUNDS = 2000
SPECULATIVE = SpeculationPolicy()  # as PPO's sample calls


def make_state() -> EngineState:
    state = EngineState("p", validate=True)
    state.handle(ev.WorkersSeen(dict(WORKERS)))
    return state


def sizes(state: EngineState) -> dict:
    spec = state.spec
    found = {
        "tasks": len(state.tasks),
        "attempts": len(state.attempts),
        "objects": len(state.objects),
        "waiters": len(state.waiters),
        "released_early": len(state.released_early),
        "spec": sum(map(len, (spec.running, spec.busy, spec.reserved, spec.losers, spec.live))),
        "durations": sum(len(w.values) for w in state.stats.durations.values()),
        "stories": len(state.log.live) + len(state.log.ended),
        "story_entries": state.log.entries(),
    }
    for obj in state.objects.values():
        found[obj.obj_id] = len(obj.calls) + len(obj.snapshots) + len(obj.held) + len(obj.queued)
    return found


def create(state, obj_id, task_id, now):
    state.handle(ev.CreateObject(obj_id, task_id, "Worker", "Worker"), now=now)
    done = ev.AttemptDone(task_id, "finished", value={"has_state": False, "thread_safe": False})
    state.handle(done, now=now)


def test_rounds_of_speculative_direct_calls_leave_the_state_as_they_found_it():
    state = make_state()
    create(state, "o1", "c1", now=0.0)
    create(state, "o2", "c2", now=0.0)
    state.handle(ev.FormGroup(("o1", "o2")), ev.Released(("c1", "c2")), now=0.0)
    history = []
    for i in range(ROUNDS):
        now = i * 0.1
        calls = [f"s{i}-1", f"s{i}-2"]
        state.handle(
            ev.CallObject(calls[0], "o1", "sample", direct_call=True, speculation=SPECULATIVE),
            ev.CallObject(calls[1], "o2", "sample", direct_call=True, speculation=SPECULATIVE),
            now=now,
        )
        state.handle(ev.Tick(), now=now + 0.02)
        for key, worker in zip(calls, ("a", "b"), strict=True):
            state.handle(ev.Started(key, worker, 0.0), now=now + 0.01)
            state.handle(ev.Ended(key, "Worker.sample", worker, 0.05, 0.0), now=now + 0.06)
            state.handle(ev.AttemptDone(key, "finished"), now=now + 0.06)
        state.handle(ev.Released(tuple(calls)), now=now + 0.07)
        history.append(sizes(state))
    assert history[-1] == history[ROUNDS // 2]
    assert history[-1]["tasks"] == 0 and history[-1]["durations"] <= 1000


def test_refs_of_internal_tasks_dropped_after_they_ended_are_forgotten():
    # A creation or a destruction is forgotten as soon as it ends; its ref may be
    # dropped later. Objects made and killed one after another, for hours.
    state = make_state()
    for i in range(ROUNDS):
        now = i * 1.0
        create(state, f"o{i}", f"c{i}", now)
        state.handle(ev.KillObject(f"o{i}", f"d{i}"), now=now)
        state.handle(ev.AttemptDone(f"d{i}", "finished"), now=now)
        state.handle(ev.Released((f"c{i}", f"d{i}")), now=now + 0.5)
    assert not state.tasks and not state.objects
    assert len(state.released_early) <= 2 * (RELEASED_EARLY_S + 1)


def test_tasks_named_one_by_one_keep_a_bounded_number_of_names_and_stories():
    """A search names each trial's task after the trial: thousands of names, each
    seen once, beside a name seen all the time."""
    state = make_state()
    for i in range(3 * NAMES_KEPT):
        now = i * 0.1
        for task_id, name in ((f"t{i}", f"trial-{i:05d}"), (f"r{i}", "rollout")):
            state.handle(ev.SubmitTask(task_id, name), now=now)
            state.handle(ev.Started(task_id, "a", 0.0), now=now)
            state.handle(ev.Ended(task_id, name, "a", 0.05, 0.0), now=now + 0.05)
            state.handle(
                ev.AttemptDone(task_id, "finished"), ev.Released((task_id,)), now=now + 0.05
            )
    for table in (state.stats.durations, state.mean_s, state.tally):
        assert len(table) == NAMES_KEPT
        assert "rollout" in table and f"trial-{3 * NAMES_KEPT - 1:05d}" in table
        assert "trial-00000" not in table
    assert state.stats.durations["rollout"].count == 3 * NAMES_KEPT
    assert not state.tasks and not state.log.live
    assert 0 < len(state.log.ended) <= ENDED_KEPT and state.log.ended_entries <= ENDED_ENTRIES
    assert "now: the engine no longer knows this task" in state.story(f"r{3 * NAMES_KEPT - 1}")[-1]


def test_stories_of_long_tasks_let_go_keep_a_bounded_number_of_entries():
    """Tasks that each leave many entries (a trial that retries, a task told about
    often) keep fewer stories: the entries, not the tasks, bound what is kept."""
    state = make_state()
    for i in range(ENDED_KEPT):
        task_id = f"t{i}"
        state.handle(ev.SubmitTask(task_id, "long"), now=float(i))
        for _ in range(TASK_ENTRIES):
            state.handle(ev.Started(task_id, "a", 0.0), now=float(i))
        state.handle(ev.AttemptDone(task_id, "finished"), ev.Released((task_id,)), now=i + 0.5)
        state.handle(ev.Started(task_id, "a", 0.0), now=i + 0.6)  # a late word of it
        assert state.log.ended_entries == sum(map(len, state.log.ended.values()))
    assert state.log.entries() <= ENDED_ENTRIES + len(state.log.cluster)
    assert len(state.log.ended) == ENDED_ENTRIES // TASK_ENTRIES
    newest = state.story(f"t{ENDED_KEPT - 1}")
    assert newest[0].endswith("SubmitTask") and "now: the engine no longer knows" in newest[-1]


def test_reports_of_tasks_of_other_engines_leave_no_story():
    """The workers' engines report their tasks where the driver's engine hears them:
    they are no task of its own, and its log keeps none of them."""
    state = make_state()
    before = state.log.entries()
    for i in range(ROUNDS):
        state.handle(ev.Started(f"nested-{i}", "a", 0.0), now=i * 0.1)
        state.handle(ev.Ended(f"nested-{i}", "rollout", "a", 0.05, 0.0), now=i * 0.1 + 0.05)
    assert state.log.entries() == before


def test_the_embedded_cluster_bounds_dasks_histories():
    settings = local_settings()
    # a sample every 500 ms: two minutes of the dashboard's system history
    assert settings["distributed.admin.system-monitor.log-length"] <= 240
    assert settings["distributed.admin.low-level-log-length"] <= 100


def test_held_settings_are_put_back_unless_changed_meanwhile():
    import dask

    key = "distributed.admin.low-level-log-length"
    before = dask.config.get(key)
    held = HeldSettings({key: 7})
    assert dask.config.get(key) == 7
    held.release()
    assert dask.config.get(key) == before
    held = HeldSettings({key: 7})
    dask.config.set({key: 9})  # someone else's since: theirs stays
    held.release()
    assert dask.config.get(key) == 9
    dask.config.set({key: before})
