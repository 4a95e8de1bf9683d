"""The worker's half of the task stream, as data: events in, instructions out, no
sockets or threads (as test_state.py does for the driver's half)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.scheduler.stream_state import (
    Cancel,
    Detach,
    Detached,
    DirectCall,
    Drop,
    DropLater,
    Fetch,
    FunctionForgotten,
    FunctionSent,
    InputLost,
    InputsFetched,
    InvalidStreamState,
    Keep,
    KeptInput,
    LookAgain,
    Note,
    Posted,
    Release,
    ReleaseSlot,
    ResultKept,
    Run,
    RunnerEnded,
    RunTask,
    Send,
    SlotTaken,
    StartCall,
    StartRunner,
    StreamEnded,
    StreamState,
    Take,
    ValueSent,
    Waits,
)

SPEC = {"name": "t", "attempt": 0, "topic": "x"}


def fn(x):
    return x


def of(kind, instructions):
    return [i for i in instructions if isinstance(i, kind)]


def sent(instructions):
    return [i.message for i in of(Send, instructions)]


def stream(*fn_ids):
    state = StreamState(validate=True)
    state.handle(*(FunctionSent(i, fn) for i in fn_ids or (1,)))
    return state


def run(key, *args, fn_id=1):
    return Run(key, SPEC, fn_id, args, {})


def done(key, status="OK", value=1):
    return Posted(("done", key, status, value, 0.01))


def test_a_task_is_queued_taken_by_a_runner_and_answered():
    state = stream()
    assert of(Note, state.handle(run("a", 1)))[0].what == "received; queued for a slot"
    assert state.wants_runner()
    assert of(StartRunner, state.handle(SlotTaken())) and not state.wants_runner()
    (task,) = state.handle(Take())
    assert (type(task), task.key, task.fn, task.args) == (RunTask, "a", fn, (1,))
    assert state.handle(Take()) == []  # nothing more queued
    out = state.handle(done("a", value=2))
    assert sent(out) == [("done", "a", "OK", 2, 0.01)] and not of(Send, out)[0].at_once
    assert state.active == set()
    assert of(ReleaseSlot, state.handle(RunnerEnded(holds=True))) and state.runners == 0


def test_tasks_run_in_the_order_they_came():
    state = stream()
    state.handle(*(run(k) for k in "abc"), SlotTaken())
    assert [state.handle(Take())[0].key for _ in range(3)] == ["a", "b", "c"]


def test_a_task_naming_an_unknown_function_is_answered_an_error():
    state = stream()
    (answer,) = sent(state.handle(run("a", fn_id=7)))
    assert answer[:3] == ("done", "a", "error") and "no function 7" in str(answer[3])
    assert not state.queued


def test_a_forgotten_function_is_gone():
    state = stream(1, 2)
    state.handle(FunctionForgotten(1))
    assert set(state.functions) == {2}


def test_a_task_with_kept_inputs_is_queued_once_they_arrive():
    state = stream()
    kept = KeptInput("big", "tcp://peer:1")
    (fetch,) = of(Fetch, state.handle(run("a", kept)))
    assert fetch.args == (kept,) and state.fetching == {"a"} and not state.wants_runner()
    state.handle(InputsFetched("a", SPEC, fn, ("value",), {}))
    assert state.fetching == set() and list(state.queued) == ["a"]
    assert state.queued["a"][2] == ("value",)


def test_a_lost_input_answers_input_lost_and_runs_nothing():
    state = stream()
    state.handle(run("a", KeptInput("big", "tcp://peer:1")))
    out = state.handle(InputLost("a", "its worker is gone"))
    assert sent(out) == [("done", "a", "input-lost", "its worker is gone", None)]
    assert not state.queued and not state.fetching


def test_a_task_cancelled_while_it_fetches_answers_cancelled_once_fetched():
    state = stream()
    state.handle(run("a", KeptInput("big", "tcp://peer:1")))
    assert not of(Detach, state.handle(Cancel("a")))  # nothing runs yet
    out = state.handle(InputsFetched("a", SPEC, fn, ("value",), {}))
    assert sent(out) == [("done", "a", "cancelled", None, None)]
    assert not state.queued and not state.cancelled


def test_a_queued_task_cancelled_is_answered_at_once_and_never_taken():
    state = stream()
    state.handle(run("a"), SlotTaken())
    assert sent(state.handle(Cancel("a"))) == [("done", "a", "cancelled", None, None)]
    assert state.handle(Take()) == [] and not state.cancelled


def test_a_running_task_cancelled_gives_its_slot_on_and_its_answer_goes_unsent():
    state = stream()
    state.handle(run("a"), run("b"), SlotTaken(), Take())
    assert of(Detach, state.handle(Cancel("a"))) == [Detach("a")]
    state.handle(Detached("a"))
    assert state.runners == 0 and state.wants_runner()  # "b" gets the freed slot
    state.handle(ResultKept("a"))
    out = state.handle(done("a", "kept", 200_000))
    assert sent(out) == [] and of(Drop, out) == [Drop("a")]  # nobody will ask for it
    assert not state.cancelled and not state.active and not state.results
    assert of(LookAgain, state.handle(RunnerEnded(holds=False)))  # "b" still waits


def test_a_second_cancel_changes_nothing():
    state = stream()
    state.handle(run("a"), SlotTaken(), Take(), Cancel("a"), Detached("a"))
    assert state.handle(Cancel("a")) == [] and state.runners == 0


def test_a_cancel_after_the_answer_left_keeps_nothing():
    state = stream()
    state.handle(run("a"), SlotTaken(), Take(), done("a"))
    assert state.handle(Cancel("a")) == [] and state.cancelled == set()


def test_a_waiting_task_lends_its_runner_and_takes_it_back():
    state = stream()
    state.handle(run("parent"), run("child"), SlotTaken(), Take())
    state.handle(Waits("parent", True))
    assert state.runners == 0 and state.wants_runner()
    state.handle(SlotTaken(), Take(), done("child"), RunnerEnded(holds=True))
    state.handle(Waits("parent", False))
    assert state.runners == 1


def test_kept_results_and_puts_are_let_go_when_released_or_when_the_stream_ends():
    state = stream()
    assert of(Keep, state.handle(ValueSent("put-1", [1, 2]))) == [Keep("put-1", [1, 2])]
    state.handle(run("a"), run("b"), run("c"), SlotTaken(), Take(), ResultKept("a"))
    state.handle(done("a", "kept", 200_000), Take(), ResultKept("b"), done("b", "kept", 9))
    out = state.handle(Release("a"))
    assert of(Drop, out) == [Drop("a")] and of(Note, out)[0].what == "its kept result released"
    out = state.handle(StreamEnded())
    assert of(Drop, out) == [Drop("put-1")]  # the engine's puts go with it
    assert of(DropLater, out) == [DropLater(frozenset({"b"}))]  # results after a grace
    assert [n.what for n in of(Note, out)] == ["dropped unstarted: its engine's stream ended"]
    assert not state.queued and not state.wants_runner() and state.handle(Take()) == []


def test_after_the_stream_ended_nothing_is_queued_or_kept():
    state = stream()
    state.handle(run("a", KeptInput("big", "tcp://peer:1")), run("b"), SlotTaken(), Take())
    state.handle(StreamEnded())
    (note,) = state.handle(InputsFetched("a", SPEC, fn, (1,), {}))
    assert "after its engine's stream ended: not run" in note.what and not state.queued
    assert state.handle(ResultKept("b")) == [Drop("b")]  # its answer will reach nobody


def test_a_direct_call_takes_no_slot():
    state = stream()
    out = state.handle(DirectCall("c", SPEC, ("obj", "method")))
    assert of(StartCall, out) == [StartCall("c", SPEC, ("obj", "method"))]
    assert not state.wants_runner()


def test_a_broken_rule_is_named():
    state = stream()
    state.handle(run("a"))
    state.active.add("a")  # as a bug would: taken and still queued
    with pytest.raises(InvalidStreamState, match="a: queued and taken by a runner at once"):
        state.validate()


# --- any order of events a stream may see -------------------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["run", "run", "run-kept", "cancel", "fetched", "lost", "finish", "wait"]),
        st.integers(0, 5),
    ),
    min_size=5,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(STEPS, st.integers(1, 3), st.booleans())
def test_every_task_is_answered_once_and_the_runners_add_up(steps, slots, ended):
    """An executor that does what the state says, with ``slots`` slots: whatever
    arrives in whatever order, the rules hold (validate after every event), every
    task not dropped by the stream's end gets exactly one answer, and every slot
    taken is given back."""
    state = stream()
    free = slots
    runners: list[dict] = []  # each: the task it runs, or None
    answers: dict[str, int] = {}
    keys = [f"k{i}" for i in range(6)]
    started: set[str] = set()
    silenced: set[str] = set()  # cancelled while they ran: the engine answers them itself

    def carry_out(instructions):
        nonlocal free
        for i in instructions:
            if type(i) is Send and i.message[0] == "done":
                answers[i.message[1]] = answers.get(i.message[1], 0) + 1
            elif type(i) is Detach:
                runner = next(r for r in runners if r["task"] == i.key)
                if not runner["lent"] and not runner["detached"]:  # as service.detach
                    runner["detached"], free = True, free + 1
                    carry_out(state.handle(Detached(i.key)))
            elif type(i) is ReleaseSlot:
                free += 1

    def dispatch():
        nonlocal free
        while state.wants_runner() and free > 0:
            free -= 1
            carry_out(state.handle(SlotTaken()))
            runners.append({"task": None, "detached": False, "lent": False})
            next_task(runners[-1])

    def next_task(runner):
        found = state.handle(Take())
        if found:
            runner["task"] = found[0].key
        else:
            runners.remove(runner)
            carry_out(state.handle(RunnerEnded(holds=True)))

    for what, n in steps:
        key = keys[n]
        if what in ("run", "run-kept") and key not in started:
            started.add(key)
            args = (KeptInput("x", "peer"),) if what == "run-kept" else ()
            carry_out(state.handle(run(key, *args)))
        elif what == "cancel":
            if any(r["task"] == key for r in runners):  # running (the model's own view)
                silenced.add(key)
            carry_out(state.handle(Cancel(key)))
        elif what in ("fetched", "lost") and key in state.fetching:
            event = (
                InputsFetched(key, SPEC, fn, (), {}) if what == "fetched" else InputLost(key, "")
            )
            carry_out(state.handle(event))
        elif what == "wait":
            for runner in runners:
                if runner["task"] == key and not runner["detached"]:
                    runner["lent"] = not runner["lent"]
                    free += 1 if runner["lent"] else -1  # (a resumed task may overdraw)
                    carry_out(state.handle(Waits(key, runner["lent"])))
        elif what == "finish":
            for runner in [r for r in runners if r["task"] == key]:
                if runner["lent"]:  # it resumes first
                    runner["lent"], free = False, free - 1
                    carry_out(state.handle(Waits(key, False)))
                carry_out(state.handle(done(key)))
                if runner["detached"]:
                    runners.remove(runner)
                    carry_out(state.handle(RunnerEnded(holds=False)))
                else:
                    next_task(runner)
        dispatch()
        assert state.runners == sum(not r["detached"] and not r["lent"] for r in runners)
    if ended:
        carry_out(state.handle(StreamEnded()))
    else:  # let everything run out
        while state.fetching:
            carry_out(state.handle(InputsFetched(min(state.fetching), SPEC, fn, (), {})))
            dispatch()
        while runners:
            runner = runners[0]
            if runner["lent"]:
                runner["lent"], free = False, free - 1
                carry_out(state.handle(Waits(runner["task"], False)))
            carry_out(state.handle(done(runner["task"])))
            if runner["detached"]:
                runners.remove(runner)
                carry_out(state.handle(RunnerEnded(holds=False)))
            else:
                next_task(runner)
            dispatch()
        assert set(answers) == started - silenced  # every task answered...
        assert free == slots and state.runners == 0
        assert not (state.queued or state.fetching or state.active or state.cancelled)  # bounded
    assert all(count == 1 for count in answers.values())  # ...and never twice
    assert not set(answers) & silenced
    assert not state.cancelled - state.fetching - state.active
