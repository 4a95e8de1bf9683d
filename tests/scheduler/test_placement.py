"""Where the engine sends plain tasks of the direct route, without a cluster."""

import hypothesis.strategies as st
from hypothesis import given

from hrl_tasks.scheduler.placement import PIPELINE, LeastLoaded, choose_worker

THREADS = {"a": 1, "b": 2}


def test_the_least_loaded_worker_per_thread_takes_the_task():
    assert choose_worker(THREADS, {"a": 1, "b": 1}) == "b"  # 1/1 against 1/2
    assert choose_worker(THREADS, {"a": 0, "b": 1}) == "a"


def test_equal_load_goes_first_where_it_changed_longest_ago():
    assert choose_worker({"a": 1, "b": 1}, {}, since={"a": 2, "b": 1}) == "b"
    assert choose_worker({"a": 1, "b": 1}, {}, since={"a": 2, "b": 3}) == "a"


def test_equal_work_spreads_in_turn():
    order = LeastLoaded()
    for worker in "abc":
        order.set(worker, 0, 1)
    chosen = []
    for _ in range(6):  # each task ends before the next comes
        worker = order.choose()
        chosen.append(worker)
        order.set(worker, 1, 1)
        order.set(worker, 0, 1)
    assert chosen == ["a", "b", "c", "a", "b", "c"]


def test_a_full_cluster_has_no_worker():
    full = {w: n * PIPELINE for w, n in THREADS.items()}
    assert choose_worker(THREADS, full) is None
    assert choose_worker(THREADS, {**full, "b": 2 * PIPELINE - 1}) == "b"


def test_inputs_draw_the_task_to_their_worker_while_it_has_room():
    assert choose_worker(THREADS, {"a": 1}, near=["a"]) == "a"
    assert choose_worker(THREADS, {"a": PIPELINE}, near=["a"]) == "b"


def test_a_resource_request_goes_only_where_it_fits_one_per_thread():
    free = {"a": {"GPU": 1.0}, "b": {}}
    assert choose_worker(THREADS, {}, {"GPU": 1}, free) == "a"
    assert choose_worker(THREADS, {"a": 1}, {"GPU": 1}, free) is None  # no pipeline


def test_avoided_workers_are_the_last_resort_and_only_limits_the_choice():
    assert choose_worker(THREADS, {}, avoid=["b"]) == "a"
    assert choose_worker(THREADS, {"a": PIPELINE}, avoid=["b"]) == "b"
    assert choose_worker(THREADS, {}, only=["a"]) == "a"
    assert choose_worker(THREADS, {"a": PIPELINE}, only=["a"]) is None


@given(
    st.dictionaries(st.sampled_from("abcd"), st.integers(1, 4), min_size=1),
    st.dictionaries(st.sampled_from("abcd"), st.integers(0, 9)),
)
def test_the_choice_has_room_and_none_means_every_worker_is_full(nthreads, in_flight):
    chosen = choose_worker(nthreads, in_flight)
    has_room = {w for w, n in nthreads.items() if in_flight.get(w, 0) < n * PIPELINE}
    if chosen is None:
        assert not has_room
    else:
        assert chosen in has_room
        load = {w: in_flight.get(w, 0) / nthreads[w] for w in has_room}
        assert load[chosen] == min(load.values())


@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.integers(-1, 9), st.integers(1, 3)), max_size=60
    ),
    st.sets(st.sampled_from("abcde")),
    st.sets(st.sampled_from("abcde")),
    st.integers(1, 4),
)
def test_the_kept_order_chooses_as_a_look_at_every_worker(changes, near, skip, depth):
    """`LeastLoaded.choose` after any changes (-1: the worker went) is `choose_worker`
    over the same workers, loads and times of change."""
    order, nthreads, in_flight = LeastLoaded(), {}, {}
    for worker, count, threads in changes:
        if count < 0:
            order.remove(worker)
            nthreads.pop(worker, None)
        else:
            order.set(worker, count, threads)
            nthreads[worker], in_flight[worker] = threads, count
        assert order.counts() == {w: (in_flight[w], n) for w, n in nthreads.items()}
    only = [w for w in nthreads if w not in skip]
    expected = choose_worker(
        nthreads, in_flight, near=near, only=only, since=order.since(), depth=depth
    )
    assert order.choose(depth, near, skip) == expected
