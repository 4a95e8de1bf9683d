"""The engine's counters on the scheduler's Prometheus ``/metrics``, where Dask users
scrape Dask's own.

Most of an engine's work never passes through the scheduler (the direct route,
stateful workers), so Dask's own metrics miss it. Each root engine reports what it
counts every :data:`REPORT_S` (:class:`MetricsReporter`, a thread of the driver's,
sending only when something changed) to the scheduler plugin :class:`EngineMetrics`,
which serves the sum over the engines it heard from (the last report of an engine
that closed stays in the sum, so that counters never go down) through a collector on
``prometheus_client``'s registry, the one Dask's ``/metrics`` page writes. Without
``prometheus_client`` in the scheduler's environment, as for Dask's own metrics,
nothing is served.

Names follow Dask's (``dask_scheduler_tasks_compute_seconds_total``): ::

    hrl_tasks_engines                               engines reporting now
    hrl_tasks_tasks_total{task_name, state}         tasks ended: finished / failed
    hrl_tasks_tasks_in_flight{task_name}            attempts sent or running now
    hrl_tasks_task_compute_seconds_total{task_name} time spent running them
    hrl_tasks_events_total{event}                   submitted, retried, cancelled,
        workers_lost, inputs_resent, recomputed, moved_from_silent, speculated,
        backup_won, original_won, objects_recreated
    hrl_tasks_speculation_saved_seconds_total       time backups saved

Only names, counts and timings, as Dask's dashboard shows to whoever reaches it:
never a task's arguments or results.

This module imports nothing of hrl_tasks: the plugin travels to the scheduler by
value (cloudpickle), so a scheduler without hrl_tasks installed takes it.
"""

from __future__ import annotations

import logging
import threading
import time

from distributed.diagnostics.plugin import SchedulerPlugin

logger = logging.getLogger(__name__)

NAME = "hrl-tasks-metrics"
HANDLER = "hrl_tasks_metrics"
REPORT_S = 2.0  # how often an engine looks whether its counters changed
SEND_TIMEOUT_S = 2.0  # a report the scheduler does not take in this long is dropped
STALE_S = 3 * REPORT_S  # an engine silent this long counts as reporting no longer
ENGINES_KEPT = 1_000  # engines whose last report stays in the sums, the newest


def report_of(view: dict, stats: dict) -> dict:
    """What an engine tells the scheduler, from its live page's view
    (`EngineState.view`) and ``engine.stats()``. Pure."""
    by_name = stats.get("by_name", {})
    tasks = {
        name: {
            "in_flight": counts["in_flight"],
            "finished": counts["finished"],
            "failed": counts["failed"],
            "compute_s": by_name.get(name, {}).get("total_s", 0.0),
        }
        for name, counts in view["by_name"].items()
    }
    # The engine's counters (`stats.COUNTERS`) but the time saved, which is seconds.
    events = {k: v for k, v in stats.items() if k not in ("by_name", "time_saved_s")}
    return {"tasks": tasks, "events": events, "saved_s": stats.get("time_saved_s", 0.0)}


def families(reports: dict, now: float) -> list[tuple[str, str, str, list]]:
    """The metric families for ``reports`` (engine id -> (time heard, report, closed)),
    as (name, type, help, [(labels, value)]): counters summed over every engine,
    in-flight attempts over the engines reporting now. Pure."""
    live = {
        engine
        for engine, (heard, _, closed) in reports.items()
        if not closed and now - heard <= STALE_S
    }
    ended: dict = {}
    in_flight: dict = {}
    compute: dict = {}
    events: dict = {}
    saved = 0.0
    for engine, (_, report, _) in reports.items():
        for name, counts in report["tasks"].items():
            for state in ("finished", "failed"):
                ended[(name, state)] = ended.get((name, state), 0) + counts[state]
            compute[name] = compute.get(name, 0.0) + counts["compute_s"]
            if engine in live:
                in_flight[name] = in_flight.get(name, 0) + counts["in_flight"]
        for event, count in report["events"].items():
            events[event] = events.get(event, 0) + count
        saved += report["saved_s"]
    return [
        (
            "hrl_tasks_engines",
            "gauge",
            "hrl_tasks engines reporting to this scheduler",
            [({}, len(live))],
        ),
        (
            "hrl_tasks_tasks",
            "counter",
            "hrl_tasks tasks ended, by name and state",
            [({"task_name": n, "state": s}, v) for (n, s), v in sorted(ended.items())],
        ),
        (
            "hrl_tasks_tasks_in_flight",
            "gauge",
            "hrl_tasks attempts sent or running",
            [({"task_name": n}, v) for n, v in sorted(in_flight.items())],
        ),
        (
            "hrl_tasks_task_compute_seconds",
            "counter",
            "time hrl_tasks tasks spent running, measured on the workers",
            [({"task_name": n}, v) for n, v in sorted(compute.items())],
        ),
        (
            "hrl_tasks_events",
            "counter",
            "hrl_tasks engine events: retries, backups, recomputations, objects re-created, ...",
            [({"event": e}, v) for e, v in sorted(events.items())],
        ),
        (
            "hrl_tasks_speculation_saved_seconds",
            "counter",
            "time hrl_tasks backup attempts saved",
            [({}, saved)],
        ),
    ]


class EngineMetrics(SchedulerPlugin):
    """On the scheduler: hears the engines' reports (the ``hrl_tasks_metrics``
    handler) and serves their sums on ``/metrics``."""

    name = NAME
    idempotent = True  # one per scheduler, whichever engine registers it first

    def __init__(self) -> None:
        self.reports: dict = {}  # engine id -> (time heard, report, closed)
        self.collector = None

    async def start(self, scheduler) -> None:
        scheduler.handlers[HANDLER] = self.receive
        try:
            import prometheus_client
        except ImportError:  # as Dask's own metrics: none without the package
            return
        self.collector = Collector(self)
        prometheus_client.REGISTRY.register(self.collector)

    def receive(self, engine: str, report: dict, closed: bool = False) -> str:
        self.reports.pop(engine, None)
        self.reports[engine] = (time.monotonic(), report, closed)
        while len(self.reports) > ENGINES_KEPT:
            del self.reports[next(iter(self.reports))]
        return "OK"

    async def close(self) -> None:
        if self.collector is not None:
            import prometheus_client

            prometheus_client.REGISTRY.unregister(self.collector)
            self.collector = None


class Collector:
    """A ``prometheus_client`` collector of :func:`families`."""

    def __init__(self, plugin: EngineMetrics) -> None:
        self.plugin = plugin

    def describe(self) -> list:
        return []  # nothing asked at registration: the families are read when scraped

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}
        for name, kind, help_text, samples in families(self.plugin.reports, time.monotonic()):
            labels = sorted({k for sample_labels, _ in samples for k in sample_labels})
            family = kinds[kind](name, help_text, labels=labels)
            for sample_labels, value in samples:
                family.add_metric([sample_labels[k] for k in labels], value)
            yield family


class MetricsReporter:
    """In the driver: every :data:`REPORT_S`, the engine's `report_of` to the
    scheduler when it changed; once more when the engine closes."""

    def __init__(self, engine) -> None:
        self.engine, self.last = engine, None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name="hrl-tasks-metrics", daemon=True)

    @classmethod
    def start(cls, engine) -> MetricsReporter:
        from hrl_tasks.scheduler.worker_events import register_by_value

        register_by_value(engine.client, EngineMetrics(), NAME)
        reporter = cls(engine)
        reporter.thread.start()
        return reporter

    def run(self) -> None:
        while not self.stopped.wait(REPORT_S):
            self.send()

    def send(self, closed: bool = False) -> None:
        client = self.engine.client
        try:
            report = report_of(self.engine.view(), self.engine.stats())
            if (report == self.last and not closed) or client.status != "running":
                return
            client.sync(
                client.scheduler.hrl_tasks_metrics,
                engine=self.engine.topic,
                report=report,
                closed=closed,
                callback_timeout=SEND_TIMEOUT_S,  # a scheduler gone: the engine closes anyway
            )
            self.last = report
        except Exception as exc:  # a scheduler gone or going: the next report may pass
            logger.debug("hrl_tasks: the metrics report did not reach the scheduler: %r", exc)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.send(closed=True)
