"""No wait on the engine without a bound: time limits, and stalls that explain themselves."""

import logging
import re
import time

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


def test_a_time_limit_ends_every_kind_of_wait(engine):
    slow = engine.submit(tasks.sleep_then, 1, 20.0, name="slow")
    started = time.monotonic()
    with engine.time_limit(1.0):
        with pytest.raises(hrl.DeadlineReached):
            engine.gather([slow])
        with pytest.raises(hrl.DeadlineReached):
            slow.result()
        with pytest.raises(hrl.DeadlineReached):
            engine.wait([slow])
        with pytest.raises(hrl.DeadlineReached):
            list(engine.as_completed([slow]))
    assert time.monotonic() - started < 5.0
    fast = engine.submit(tasks.inc, 1)
    with engine.time_limit(30.0):
        assert fast.result() == 2  # within the limit, waits end as they would
        assert engine.wait([slow], timeout=0.1)[1] == {slow}  # the caller's timeout: no raise
    slow.cancel()


def test_a_wait_without_progress_tells_the_story_of_what_it_waits_for(caplog):
    with hrl.Engine.local(n_workers=1, threads_per_worker=1, stall_warning_s=1.0) as engine:
        engine.submit(tasks.inc, 1).result(timeout=30)
        ref = engine.submit(tasks.sleep_then, 5, 3.0, name="stuck")
        with caplog.at_level(logging.WARNING, logger="hrl_tasks.scheduler"):
            assert engine.gather([ref], timeout=30) == [5]
    warnings = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    assert warnings, "a gather that saw no progress for 1 s said nothing"
    assert "a gather has waited" in warnings[0] and "story of stuck" in warnings[0]
    # where the attempt runs (or, on the direct route, was sent), and for how long
    assert re.search(r"(running on|sent to) tcp://\S+ (for )?[1-9]", warnings[0]), warnings[0]


def test_a_story_reads_from_submission_to_resolution(engine):
    ref = engine.submit(tasks.inc, 41, name="answer")
    assert ref.result(timeout=30) == 42
    story = engine.story(ref)
    for step in ("SubmitTask", "Launch", "AttemptDone: finished", "Resolve", "now: finished"):
        assert step in story


def test_a_dask_route_task_s_story_has_dask_s_scheduler_and_worker_parts(engine):
    ref = engine.submit(tasks.inc, 1, name="dask-routed", route="dask")
    assert ref.result(timeout=30) == 2
    story = engine.story(ref)
    told = [line for line in story.splitlines() if " Worker" in line and "Dask:" in line]
    # the scheduler's transitions, then the worker's, oldest first among the engine's own
    assert any("scheduler: Dask: processing -> memory" in line for line in told), story
    assert any(re.search(r"tcp://\S+: Dask: executing -> memory", line) for line in told), story
    assert story.index("SubmitTask") < story.index("Dask: processing -> memory")
    assert "did not tell" not in story
