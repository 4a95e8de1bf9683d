"""What the backend keeps beside the state machine: one record per task and object,
one entry per attempt in flight, each with one lifetime."""

import concurrent.futures as cf

from hrl_tasks.scheduler.records import BackendRecords


def test_a_task_s_record_goes_when_it_settles():
    records = BackendRecords()
    outcome = cf.Future()
    records.add_task("t", outcome, ("fn", (1,), {}, "topic"), keep=True, inputs=("ref",))
    record = records.task_of("t")
    assert record.payload == ("fn", (1,), {}, "topic") and record.keep
    assert record.inputs == ("ref",) and not record.relay
    records.settle("t", value=5)
    assert outcome.result() == 5 and records.task_of("t") is None
    records.settle("t", value=6)  # once
    assert outcome.result() == 5


def test_an_object_s_record_is_made_again_with_what_rebuild_with_merged():
    records = BackendRecords()
    first = cf.Future()
    records.add_object("o", ("Factory", (1,), {"a": 1}, "topic"), first)
    records.rebuild_with("o", {"b": 2})
    assert records.recipe_of("o") == ("Factory", (1,), {"a": 1, "b": 2}, "topic")
    records.creating("o", "again")  # after its worker died: a creation without a ref
    assert records.creation_of("o") is records.tasks["again"].outcome is not first
    records.drop_object("o")
    records.rebuild_with("o", {"c": 3})  # ended for good: nothing to merge into
    assert records.creation_of("o") is None and "o" not in records.objects


def test_an_attempt_s_entry_holds_until_forgotten_and_awaits_until_answered():
    records = BackendRecords()
    records.track("k", "stream", "tcp://w:1", sent="name")
    assert records.awaits("k", "stream") and not records.awaits("k", "call")
    assert records.result_of("k") is None  # not finished
    records.finished("k", "value")
    assert records.answered("k", "stream") == ("tcp://w:1", "name")
    assert records.answered("k", "stream") is None and not records.awaits("k", "stream")
    assert records.result_of("k") == "value"  # held until the state forgets it
    assert records.forget("k") == "value" and records.in_flight == {}


def test_a_forgotten_attempt_keeps_its_entry_while_its_answer_is_awaited():
    records = BackendRecords()
    records.track("c", "call", "tcp://w:1")
    records.sent_on("c", "call", "tcp://w:1", ("launch", "spec", "call", {}))
    assert records.forget("c") is None  # cancelled before it finished
    records.finished("c", "late")  # the answer comes anyway: not held
    assert records.result_of("c") is None and records.awaits("c", "call")
    assert records.answered("c", "call") == ("tcp://w:1", ("launch", "spec", "call", {}))
    assert records.in_flight == {}
    records.sent_on("d", "call", "tcp://w:2", "again")  # sent after it was forgotten
    assert records.awaits("d", "call") and records.result_of("d") is None


def test_the_answers_awaited_at_an_address_are_known_from_the_one_table():
    records = BackendRecords()
    records.track("a", "stream", "tcp://w1", sent="task-a")
    records.track("b", "stream", "tcp://w2", sent="task-b")
    records.sent_on("c", "call", "tcp://w1", ("call",))
    records.track("d", "dask", value="future")
    assert sorted(records.awaited_at("tcp://w1")) == ["a", "c"]
    records.answered("a", "stream")
    assert records.awaited_at("tcp://w1") == ["c"]
    assert records.awaited_at("tcp://w3") == []
