"""Which workers a shrinking cluster may retire: never one that works for an engine.

Dask's adaptive scaling, and every deployment that scales down through the
scheduler (Dask Gateway's clusters, ``Cluster.adapt``), picks the workers to
retire with ``Scheduler.workers_to_close``. That sees only the tasks the
scheduler placed: the engine's direct route and its stateful workers are
invisible to it, so it would retire a worker in the middle of a rollout.

Each worker tells (:class:`BusyReport`) when it starts and stops working for an
engine: running or holding queued engine tasks, hosting a stateful worker, or
keeping a result; the scheduler plugin (:class:`KeepBusyWorkers`) hears it
through Dask's events and leaves those workers out of
``valid_workers_downscaling``, the hook ``workers_to_close`` asks.

This module imports nothing of hrl_tasks at import time: it travels to the
scheduler by value (cloudpickle), so a scheduler without hrl_tasks takes it.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

TOPIC = "hrl-tasks-busy"
NAME = "hrl-tasks-downscaling"
REPORT_NAME = "hrl-tasks-busy-report"
CHECK_S = 0.5  # how often a worker looks whether it works for an engine


class KeepBusyWorkers(SchedulerPlugin):
    """Leaves the workers that work for an engine out of the scheduler's choice of
    workers to retire."""

    name = NAME
    idempotent = True

    def __init__(self) -> None:
        self.busy: set = set()

    def log_event(self, topic, msg) -> None:
        if topic != TOPIC or not isinstance(msg, dict):
            return
        if msg.get("busy"):
            self.busy.add(msg.get("worker"))
        else:
            self.busy.discard(msg.get("worker"))

    def remove_worker(self, scheduler, worker, **kwargs) -> None:
        self.busy.discard(worker)

    def valid_workers_downscaling(self, scheduler, workers):
        return [ws for ws in workers if ws.address not in self.busy]


class BusyReport(WorkerPlugin):
    """On every worker: says on :data:`TOPIC` when the worker starts or stops working
    for an engine (checked every :data:`CHECK_S`; only changes are sent)."""

    name = REPORT_NAME
    idempotent = True

    def setup(self, worker) -> None:
        from tornado.ioloop import PeriodicCallback

        self.worker, self.busy = worker, None
        self.callback = PeriodicCallback(self.check, CHECK_S * 1000)
        self.callback.start()
        self.check()

    def teardown(self, worker) -> None:
        self.callback.stop()

    def check(self) -> None:
        from hrl_tasks.scheduler.runtime import working

        busy = working(self.worker)
        if busy != self.busy:
            self.busy = busy
            self.worker.log_event(TOPIC, {"worker": self.worker.address, "busy": busy})


def register(client) -> None:
    """Put the scheduler plugin and the workers' reports on ``client``'s cluster (once;
    registering again does nothing)."""
    from hrl_tasks.scheduler.worker_events import register_by_value

    register_by_value(client, KeepBusyWorkers(), NAME)
    client.register_plugin(BusyReport(), name=REPORT_NAME)


def busy_workers(dask_scheduler=None) -> list:
    """The workers the plugin keeps (run on the scheduler: ``client.run_on_scheduler``)."""
    plugin = dask_scheduler.plugins.get(NAME)
    return sorted(plugin.busy) if plugin is not None else []
