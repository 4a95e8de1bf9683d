import hypothesis.strategies as st
import pytest
from hypothesis import given

from hrl_tasks.scheduler.errors import ResourceError
from hrl_tasks.scheduler.resources import Ledger, check_satisfiable, fits, normalize_request


def make_ledger():
    ledger = Ledger()
    ledger.add_worker("a", {"CPU": 2, "memory": 8e9})
    ledger.add_worker("b", {"CPU": 2, "GPU": 1, "memory": 8e9})
    return ledger


def test_normalize_drops_zeros_and_checks_types():
    assert normalize_request(None) == {}
    assert normalize_request({"CPU": 1, "GPU": 0}) == {"CPU": 1.0}
    with pytest.raises(TypeError, match="mapping"):
        normalize_request(["CPU"])
    with pytest.raises(TypeError, match="'CPU' must be a number"):
        normalize_request({"CPU": "1"})
    with pytest.raises(ValueError, match=">= 0"):
        normalize_request({"CPU": -1})


@pytest.mark.parametrize("amount", [float("nan"), float("inf"), float("-inf")])
def test_normalize_refuses_non_finite_amounts(amount):
    with pytest.raises(ValueError, match="resource 'GPU' must be a finite number"):
        normalize_request({"CPU": 1, "GPU": amount})


def test_fits_needs_every_resource():
    assert fits({"CPU": 1}, {"CPU": 1, "GPU": 1})
    assert not fits({"GPU": 1}, {"CPU": 4})
    assert not fits({"CPU": 2.5}, {"CPU": 2})


def test_check_names_request_and_workers():
    ledger = make_ledger()
    ledger.check({"GPU": 1})
    with pytest.raises(ResourceError) as info:
        ledger.check({"GPU": 2})
    message = str(info.value)
    assert "GPU=2" in message and "b: CPU=2, GPU=1" in message and "a: CPU=2" in message


def test_empty_cluster_is_not_judged():
    check_satisfiable({"GPU": 8}, {})


def test_spread_places_on_least_loaded_then_alternates():
    ledger = make_ledger()
    placed = []
    for i in range(4):
        worker = ledger.choose({"CPU": 1}, "spread")
        ledger.acquire(f"obj{i}", worker, {"CPU": 1})
        placed.append(worker)
    assert sorted(placed) == ["a", "a", "b", "b"]
    assert placed[0] != placed[1]
    assert ledger.choose({"CPU": 1}, "spread") is None


def test_pack_fills_one_worker_first():
    ledger = make_ledger()
    first = ledger.choose({"CPU": 1}, "pack")
    ledger.acquire("x", first, {"CPU": 1})
    assert ledger.choose({"CPU": 1}, "pack") == first


def test_request_goes_only_where_it_fits():
    ledger = make_ledger()
    assert ledger.choose({"GPU": 1}) == "b"
    ledger.acquire("learner", "b", {"GPU": 1})
    assert ledger.choose({"GPU": 1}) is None
    assert ledger.free("b") == {"CPU": 2, "GPU": 0, "memory": 8e9}
    ledger.release("learner")
    assert ledger.choose({"GPU": 1}) == "b"


def test_exclude_and_remove_worker():
    ledger = make_ledger()
    ledger.acquire("obj", "a", {"CPU": 1})
    assert ledger.choose({"CPU": 1}, exclude=["b"]) == "a"
    assert ledger.remove_worker("a") == ["obj"]
    assert "obj" not in ledger.holdings
    assert ledger.choose({"CPU": 1}, exclude=["b"]) is None


def test_double_acquire_is_an_error():
    ledger = make_ledger()
    ledger.acquire("obj", "a", {})
    with pytest.raises(KeyError):
        ledger.acquire("obj", "b", {})


def test_unknown_strategy():
    with pytest.raises(ValueError, match="spread"):
        make_ledger().choose({}, "random")


def test_what_other_engines_hold_counts_as_held_and_for_spread():
    ledger = make_ledger()
    ledger.acquire("mine", "a", {"CPU": 1})
    ledger.see_others({"a": {"mine": {"CPU": 1}}, "b": {"theirs": {"CPU": 2}}})
    assert ledger.free("b")["CPU"] == 0 and ledger.free("a")["CPU"] == 1
    assert ledger.choose({"CPU": 1}) == "a"  # b is full of another engine's objects
    assert ledger.count_on("b") == 1 and ledger.count_on("a") == 1


def test_a_released_holder_is_not_taken_for_another_engines_from_a_late_read():
    ledger = make_ledger()
    ledger.acquire("mine", "b", {"CPU": 2})
    ledger.release("mine")
    ledger.see_others({"b": {"mine": {"CPU": 2}}})  # read before the release was recorded
    assert ledger.free("b")["CPU"] == 2
    ledger.see_others({"b": {}})
    assert ledger.released == set()  # forgotten once the scheduler no longer shows it


def test_avoided_workers_are_taken_only_when_no_other_has_room():
    ledger = make_ledger()
    assert ledger.choose({"CPU": 1}, "spread", avoid={"a"}) == "b"
    assert ledger.choose({"CPU": 1}, "pack", avoid={"a"}) == "b"
    ledger.acquire("x", "b", {"CPU": 2})
    assert ledger.choose({"CPU": 1}, "spread", avoid={"a"}) == "a"
    assert ledger.choose({"GPU": 1}, "spread", avoid={"b"}) == "b"  # the only GPU


def test_the_ledger_describes_each_workers_room_and_holders_for_errors():
    ledger = Ledger(capacity={"a": {"CPU": 1}, "b": {"CPU": 2}})
    ledger.acquire("obj-1", "a", {"CPU": 1})
    ledger.see_others({"b": {"theirs": {"CPU": 1}}})
    lines = ledger.describe({"obj-1": "RolloutWorker-0"}).splitlines()
    assert lines == [
        "  a: declares CPU=1, free CPU=0, held by RolloutWorker-0",
        "  b: declares CPU=2, free CPU=1, held by nothing of this engine's; 1 of other engines'",
    ]
    assert Ledger().describe() == "  (no workers)"


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "acquire", "release", "others"]),
            st.sampled_from("abcd"),
            st.integers(0, 5),
        ),
        max_size=40,
    ),
    st.sets(st.sampled_from("abcd")),
    st.sets(st.sampled_from("abcd")),
)
def test_spread_of_nothing_from_the_kept_order_is_the_look_at_every_worker(ops, exclude, avoid):
    ledger = Ledger()
    for op, worker, n in ops:
        if op == "add":
            ledger.add_worker(worker, {"CPU": 1})
        elif op == "remove":
            ledger.remove_worker(worker)
        elif op == "acquire" and worker in ledger.capacity and f"h{n}" not in ledger.holdings:
            ledger.acquire(f"h{n}", worker, {})
        elif op == "release":
            ledger.release(f"h{n}")
        elif op == "others":
            ledger.see_others({worker: {f"x{i}": {} for i in range(n)}})
        assert ledger.problems() == []
    assert ledger.choose({}, "spread", exclude, avoid) == ledger.choose_by_looking(
        {}, "spread", exclude, avoid
    )
