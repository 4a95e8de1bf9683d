"""A private part of distributed that a new release removes degrades, never breaks.

Each part in ``dask_compat.PARTS`` is removed in turn (``HRL_TASKS_WITHOUT_PRIVATE``,
read by the driver and, through ``distributed.nanny.environ``, by every worker
process) and a short suite runs on a real cluster: the engine keeps working, with
the feature listed as switched off missing and said so once, or fails clearly.
"""

import logging
import time

import dask
import numpy as np
import pytest
from distributed import get_worker

import hrl_tasks as hrl
from hrl_tasks.scheduler import dask_compat, settings
from tests.scheduler import tasks

KEEP_FROM_BYTES = settings.value("keep-from")  # results this large stay on their worker

NAMES = sorted(dask_compat.PARTS)


@pytest.fixture
def without(monkeypatch):
    """Act as if the private parts named went missing, here and in the workers."""

    def remove(*names: str):
        monkeypatch.setenv(dask_compat.WITHOUT_VARIABLE, ",".join(names))
        dask_compat.have.cache_clear()
        dask_compat.gone.cache_clear()
        return dask.config.set(
            {"distributed.nanny.environ": {dask_compat.WITHOUT_VARIABLE: ",".join(names)}}
        )

    yield remove
    monkeypatch.delenv(dask_compat.WITHOUT_VARIABLE, raising=False)
    dask_compat.have.cache_clear()
    dask_compat.gone.cache_clear()


def test_every_part_says_what_happens_without_it():
    for name, part in dask_compat.PARTS.items():
        assert part.gone in ("fallback", "off", "error"), name
        assert len(part.then) > 20, name
        if part.where is not None:  # found in the tested range
            assert dask_compat._found(part.where), f"{name} is not at {part.where}"  # noqa: SLF001


def test_a_removed_part_is_missed_and_told_once(without, caplog):
    with without("core.send_recv"), caplog.at_level(logging.WARNING):
        assert not dask_compat.have("core.send_recv")
        assert dask_compat.have("utils.sync")
        assert dask_compat.missing_at_start() == ["core.send_recv"]
    told = [r for r in caplog.records if "core.send_recv" in r.getMessage()]
    assert len(told) == 1 and "instead: the request written" in told[0].getMessage()


def test_the_fallbacks_that_compute_give_dask_s_answer(without):
    from distributed.deploy.local import nprocesses_nthreads
    from distributed.scheduler import heartbeat_interval

    with without("deploy.local.nprocesses_nthreads", "scheduler.heartbeat_interval"):
        for cores in (1, 2, 4, 6, 9, 12, 32, 48, 97, 128):
            assert dask_compat.default_processes(cores) == nprocesses_nthreads(cores)[0]
        for workers in (1, 10, 11, 49, 50, 199, 200, 1000):
            assert dask_compat.heartbeat_of(workers) == heartbeat_interval(workers)


def in_direct_call_worker(obj):
    """What get_worker() says inside a direct call (an address, or the error's name)."""
    try:
        return get_worker().address
    except ValueError as exc:
        return type(exc).__name__


class WhereAmI:
    def where(self):
        return in_direct_call_worker(self)


def missing_in_worker(dask_worker):
    from hrl_tasks.scheduler.runtime import WorkerRuntime

    return WorkerRuntime.of(dask_worker).missing


@pytest.mark.once
@pytest.mark.cluster
@pytest.mark.parametrize("name", NAMES)
def test_the_engine_works_without_each_private_part(without, name):
    part = dask_compat.PARTS[name]
    with without(name):
        if part.where is not None:
            assert name in dask_compat.missing_at_start()
        with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
            if part.where is not None:  # the workers were told too
                assert all(name in m for m in engine.run_on_workers(missing_in_worker).values())
            # plain tasks by both routes, a nested tree deeper than the threads
            assert engine.gather(engine.map(tasks.inc, range(6)), timeout=30) == list(range(1, 7))
            assert engine.submit(tasks.inc, 1, route="dask").result(timeout=30) == 2
            assert engine.submit(tasks.tree, 3, 2).result(timeout=60) == 8
            # a result kept on its worker, taken by a task and fetched here
            big = engine.submit(np.ones, KEEP_FROM_BYTES // 8 + 1)
            assert engine.submit(np.sum, big).result(timeout=30) == KEEP_FROM_BYTES // 8 + 1
            assert big.result(timeout=30).shape == (KEEP_FROM_BYTES // 8 + 1,)
            # a put, a cancelled running task, the tasks after it
            weights = engine.put([1, 2, 3], broadcast=True)
            assert engine.gather([engine.submit(sum, weights) for _ in range(3)]) == [6] * 3
            slow = engine.submit(tasks.sleep_then, 0, 1.0)
            time.sleep(0.3)
            engine.cancel(slow)
            assert engine.submit(tasks.inc, 2).result(timeout=30) == 3
            # a stateful object: scheduled and direct calls
            counter = engine.create_worker(tasks.Counter)
            assert counter.call("add", 1).result(timeout=30) == 1
            assert counter.call("add", 1, direct=True).result(timeout=30) == 2
            here = engine.create_worker(WhereAmI)
            call = here.call("where", direct=True)
            assert call.result(timeout=30) == here.address  # get_worker() works there
            # without the worker's context variable, as listed: by Dask's route
            assert call.direct_call is (name != "worker._worker_cvar")
            assert engine.route == ("dask" if name == "worker._worker_cvar" else "direct")
            for handle in (counter, here):
                handle.kill()


@pytest.mark.cluster
def test_workers_of_different_resources_without_their_part_fail_clearly(without):
    message = "different resources.*distributed>="
    with without("SpecCluster._correct_state"), pytest.raises(hrl.EngineError, match=message):
        hrl.Engine.local(resources=[{"CPU": 1}, {"CPU": 1, "GPU": 1}])


def test_the_processes_per_job_without_the_template_job_come_from_the_script(without):
    jobqueue = pytest.importorskip("dask_jobqueue")
    local = {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}
    with jobqueue.SLURMCluster(
        cores=4, processes=2, memory="1GB", scheduler_options=local
    ) as cluster:
        assert dask_compat.jobqueue_processes(cluster) == 2
        with without("JobQueueCluster._dummy_job"):
            assert dask_compat.jobqueue_processes(cluster) == 2


@pytest.mark.cluster
def test_a_closing_engine_without_the_client_s_handlers_leaves_its_topics(without):
    with without("Client._event_handlers"), hrl.Engine.local(n_workers=1) as engine:
        assert engine.submit(tasks.inc, 1).result(timeout=30) == 2
        assert dask_compat.topic_handler(engine.client, engine.topic) is None
