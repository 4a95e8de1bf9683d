"""Behaviour every engine backend shares; subclassed once per backend.

The subclass provides an ``eng`` fixture.
"""

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks


class EngineConformance:
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

    def test_direct_calls_and_shared_values(self, eng):
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

    def test_worker_local_builds_once_per_process(self, eng):
        seen = eng.gather([eng.submit(tasks.local_table, "table") for _ in range(8)], timeout=30)
        by_process = {}
        for pid, identity in seen:
            by_process.setdefault(pid, set()).add(identity)
        assert all(len(ids) == 1 for ids in by_process.values()), by_process
