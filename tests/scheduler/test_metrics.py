"""The engine's counters on the scheduler's Prometheus page (``/metrics``), beside Dask's."""

import time
import urllib.request

import pytest
from distributed import LocalCluster

import hrl_tasks as hrl
from hrl_tasks.scheduler import metrics
from hrl_tasks.scheduler.stats import COUNTERS, EngineStats
from tests.scheduler import tasks

# --- pure decisions ----------------------------------------------------------------


def view_and_stats(finished, failed=0, in_flight=0, compute_s=0.0, retried=0):
    view = {"by_name": {"inc": {"in_flight": in_flight, "finished": finished, "failed": failed}}}
    stats = EngineStats()
    stats.count("retried", retried)
    stats.count("time_saved_s", 0.5)
    if compute_s:
        stats.record_duration("inc", compute_s)
    return view, stats.snapshot()


def samples(families, name):
    return {
        tuple(sorted(labels.items())): v for n, _, _, s in families if n == name for labels, v in s
    }


def test_a_report_holds_names_counts_and_timings_only():
    report = metrics.report_of(*view_and_stats(3, 1, 2, 0.25, retried=4))
    assert report == {
        "tasks": {"inc": {"in_flight": 2, "finished": 3, "failed": 1, "compute_s": 0.25}},
        "events": {c: 0 for c in COUNTERS if c != "time_saved_s"} | {"retried": 4},
        "saved_s": 0.5,
    }


def test_counters_sum_over_every_engine_heard_and_in_flight_over_those_reporting_now():
    now = 1000.0
    reports = {
        "closed": (now - 500, metrics.report_of(*view_and_stats(5, in_flight=0)), True),
        "silent": (now - 60, metrics.report_of(*view_and_stats(2, in_flight=7)), False),
        "live": (now - 1, metrics.report_of(*view_and_stats(1, 1, 3, 1.5, retried=2)), False),
    }
    families = metrics.families(reports, now)
    assert samples(families, "hrl_tasks_engines") == {(): 1}
    ended = samples(families, "hrl_tasks_tasks")
    assert ended[(("state", "finished"), ("task_name", "inc"))] == 8
    assert ended[(("state", "failed"), ("task_name", "inc"))] == 1
    assert samples(families, "hrl_tasks_tasks_in_flight") == {(("task_name", "inc"),): 3}
    assert samples(families, "hrl_tasks_task_compute_seconds") == {(("task_name", "inc"),): 1.5}
    assert samples(families, "hrl_tasks_events")[(("event", "retried"),)] == 2
    assert samples(families, "hrl_tasks_speculation_saved_seconds") == {(): 1.5}


def test_an_engine_s_report_replaces_its_last_and_the_oldest_engines_go_beyond_the_bound():
    plugin = metrics.EngineMetrics()
    report = metrics.report_of(*view_and_stats(1))
    for i in range(metrics.ENGINES_KEPT + 5):
        plugin.receive(f"engine-{i}", report)
    plugin.receive("engine-5", report, closed=True)
    assert len(plugin.reports) == metrics.ENGINES_KEPT
    assert "engine-0" not in plugin.reports and list(plugin.reports)[-1] == "engine-5"


# --- on a real scheduler ------------------------------------------------------------


def scraped(cluster) -> str:
    link = cluster.dashboard_link.rsplit("/", 1)[0] + "/metrics"
    with urllib.request.urlopen(link, timeout=10) as page:
        return page.read().decode()


def wait_until_scraped(cluster, *lines, timeout=20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = scraped(cluster)
        if all(line in text for line in lines) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_the_engines_counters_are_on_the_scheduler_s_prometheus_page_beside_dask_s():
    pytest.importorskip("prometheus_client", reason="needs the test extra")
    local = {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, **local) as cluster:
        with hrl.Engine.connect(cluster.scheduler_address) as engine:
            assert engine.gather(engine.map(tasks.inc, range(5)), timeout=30) == [1, 2, 3, 4, 5]
            assert engine.submit(tasks.flaky, 1, retries=1).result(timeout=30) == 1
            finished = 'hrl_tasks_tasks_total{state="finished",task_name="inc"} 5.0'
            text = wait_until_scraped(cluster, finished, 'event="retried"} 1.0')
            assert finished in text, text[-3000:]
            assert 'hrl_tasks_events_total{event="retried"} 1.0' in text
            assert 'hrl_tasks_task_compute_seconds_total{task_name="inc"}' in text
            assert "hrl_tasks_engines 1.0" in text
            assert "dask_scheduler_workers" in text  # Dask's own metrics stay
        # A closed engine's counts stay in the sums; the next engine's add to them.
        with hrl.Engine.connect(cluster.scheduler_address) as engine:
            engine.gather(engine.map(tasks.inc, range(3)), timeout=30)
            eight = 'hrl_tasks_tasks_total{state="finished",task_name="inc"} 8.0'
            text = wait_until_scraped(cluster, eight, "hrl_tasks_engines 1.0")
            assert eight in text and "hrl_tasks_engines 1.0" in text, text[-3000:]
