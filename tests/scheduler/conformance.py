"""Behaviour every engine backend and every route shares; subclassed once each.

The subclass provides an ``eng`` fixture. A subclass for one route names it
(``route``: ``"dask"``, ``"stream"``, ``"call"``) and passes alone: every attempt
of the kind that route carries goes by it, none by another.
"""

import collections

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks


def launched(eng) -> collections.Counter:
    """``(route, kind) -> attempts launched`` so far (an in-process engine has none)."""
    return collections.Counter(getattr(eng.backend, "launched", {}))


class RouteAlone:
    """Each test of the class launches its kind (``carried``) by ``route`` alone."""

    route: str | None = None
    carried = "task"

    @pytest.fixture(autouse=True)
    def alone(self, eng):
        before = launched(eng)
        yield
        if self.route is None:
            return
        new = launched(eng) - before
        others = {rk: n for rk, n in new.items() if rk[1] == self.carried and rk[0] != self.route}
        assert not others, f"{self.carried} attempts went by other routes: {others}"


class EngineConformance(RouteAlone):
    def test_submit_and_result(self, eng):
        assert eng.submit(tasks.add, 2, 3).result(timeout=30) == 5

    def test_map_and_gather_keep_order(self, eng):
        refs = eng.map(tasks.inc, range(20))
        assert eng.gather(refs, timeout=60) == list(range(1, 21))

    def test_refs_as_dependencies(self, eng):
        a = eng.submit(tasks.inc, 1)
        b = eng.submit(tasks.add, a, 10)
        c = eng.submit(tasks.total, [a, b, 100])
        assert c.result(timeout=30) == 2 + 12 + 100

    def test_error_propagates_with_its_type(self, eng):
        ref = eng.submit(tasks.fail, "boom")
        with pytest.raises(ValueError, match="boom"):
            ref.result(timeout=30)
        assert isinstance(ref.exception(timeout=30), ValueError)

    def test_retries_see_their_attempt_number(self, eng):
        ref = eng.submit(tasks.flaky, 2, retries=3)
        assert ref.result(timeout=30) == 2
        assert ref.attempts == 3

    def test_retry_policy_filters_exception_types(self, eng):
        ref = eng.submit(tasks.flaky, 1, retries=hrl.RetryPolicy(3, retry_on=(KeyError,)))
        with pytest.raises(ConnectionError):
            ref.result(timeout=30)
        assert ref.attempts == 1

    def test_failed_input_fails_the_dependent(self, eng):
        bad = eng.submit(tasks.fail, "upstream")
        after = eng.submit(tasks.inc, bad)
        with pytest.raises(ValueError, match="upstream"):
            after.result(timeout=30)

    def test_unsatisfiable_request_raises(self, eng):
        with pytest.raises(hrl.ResourceError, match="NoSuchThing=1"):
            eng.submit(tasks.inc, 1, resources={"NoSuchThing": 1})

    def test_wait_and_as_completed(self, eng):
        refs = eng.map(tasks.inc, range(5))
        done, not_done = eng.wait(refs, timeout=30)
        assert done == set(refs) and not not_done
        assert sorted(r.result() for r in eng.as_completed(refs)) == list(range(1, 6))
        with pytest.raises(ValueError, match="return_when"):
            eng.wait(refs, return_when="SOME")

    def test_stateful_calls_run_in_order(self, eng):
        counter = eng.create_worker(tasks.Counter, start=10)
        refs = [counter.call("add", 1) for _ in range(8)]
        assert eng.gather(refs, timeout=30) == list(range(11, 19))
        counter.kill()

    def test_stats_count_tasks_by_name(self, eng):
        eng.gather(eng.map(tasks.inc, range(3), name="counted"), timeout=30)
        stats = eng.stats()
        assert stats["submitted"] >= 3 and stats["finished"] >= 3
        assert set(stats) >= {"failed", "retried", "workers_lost", "by_name"}

    def test_put_places_a_value_once_for_many_tasks(self, eng):
        weights = eng.put([1, 2, 3])
        refs = [eng.submit(tasks.total, weights) for _ in range(3)]
        assert eng.gather(refs, timeout=30) == [6, 6, 6]
        mapping = eng.put({"a": 1, "b": 2})  # one value, not one per item
        assert eng.submit(sorted, mapping).result(timeout=30) == ["a", "b"]

    def test_worker_local_builds_once_per_process(self, eng):
        seen = eng.gather([eng.submit(tasks.local_table, "table") for _ in range(8)], timeout=30)
        by_process = {}
        for pid, identity in seen:
            by_process.setdefault(pid, set()).add(identity)
        assert all(len(ids) == 1 for ids in by_process.values()), by_process


class CallConformance(RouteAlone):
    """What the direct calls of stateful objects promise (``direct=True``)."""

    route = "call"
    carried = "call"

    def test_calls_run_in_order_and_their_results_come_back(self, eng):
        counter = eng.create_worker(tasks.Counter, start=10)
        refs = [counter.call("add", 1, direct=True) for _ in range(8)]
        assert eng.gather(refs, timeout=30) == list(range(11, 19))
        counter.kill()

    def test_an_error_comes_with_its_type_and_later_calls_go_on(self, eng):
        box = eng.create_worker(tasks.Box)
        with pytest.raises(AttributeError, match="nope"):
            box.call("nope", direct=True).result(timeout=30)
        assert box.call("put", 3, direct=True).result(timeout=30) is True
        assert box.call("get", direct=True).result(timeout=30) == 3
        box.kill()

    def test_a_call_takes_another_call_s_result_kept_on_its_worker_or_here(self, eng):
        source, sink = [eng.create_worker(tasks.Box) for _ in range(2)]
        assert source.call("put", [1, 2, 3], direct=True).result(timeout=30) is True
        kept = source.call("get", direct=True, keep=True)
        here = source.call("get", direct=True)
        assert sink.call("put", {"kept": kept, "here": here}, direct=True).result(timeout=30)
        assert sink.call("get", direct=True).result(timeout=30) == {
            "kept": [1, 2, 3],
            "here": [1, 2, 3],
        }
        assert eng.gather([kept, here], timeout=30) == [[1, 2, 3]] * 2  # fetched, local
        for box in (source, sink):
            box.kill()

    def test_a_failed_input_fails_the_call_that_takes_it(self, eng):
        source, sink = [eng.create_worker(tasks.Box) for _ in range(2)]
        failing = source.call("nope", direct=True, keep=True)
        with pytest.raises(Exception) as info:
            sink.call("put", failing, direct=True).result(timeout=30)
        # Its input's error, as a plain task's (in one process), or told as the input's.
        error = info.value
        if isinstance(error, hrl.InputFailedError):
            assert "its input 'Box.nope' failed" in str(error)
            error = error.__cause__
        assert isinstance(error, AttributeError)
        assert sink.call("put", 4, direct=True).result(timeout=30) is True
        for box in (source, sink):
            box.kill()

    def test_wait_and_as_completed_take_calls(self, eng):
        counter = eng.create_worker(tasks.Counter)
        refs = [counter.call("add", 2, direct=True) for _ in range(4)]
        done, not_done = eng.wait(refs, timeout=30)
        assert done == set(refs) and not not_done
        assert sorted(r.result() for r in eng.as_completed(refs)) == [2, 4, 6, 8]
        counter.kill()

    def test_shared_values_reach_every_object(self, eng):
        boxes = [eng.create_worker(tasks.Box) for _ in range(2)]
        shared = eng.share([1, 2, 3])
        assert eng.gather([b.call("put", shared, direct=True) for b in boxes], timeout=30) == [
            True,
            True,
        ]
        assert (
            eng.gather([b.call("get", direct=True) for b in boxes], timeout=30) == [[1, 2, 3]] * 2
        )
        for box in boxes:
            box.kill()
