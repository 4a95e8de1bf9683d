"""Workers coming and going, told to the engines on a topic of their own.

The scheduler logs a worker's arrival and departure to its ``"all"`` topic,
together with everything else; some of what else it logs there cannot be sent
to a client (``Scheduler.replicate`` logs ``WorkerState`` objects, which break
the connection of every client subscribed to ``"all"``). So the engines do not
subscribe to it: this scheduler plugin copies the two events they need, as
plain data, to :data:`TOPIC`.

It also tells when a worker stops reporting (``"silent"``: its heartbeats lag the
other workers' by ``SILENT_S``, at least five heartbeats) and when it reports
again (``"reporting"``): a stopped (SIGSTOP) or swapping process still accepts
connections, so nothing else says it. Lags between workers, all on the
scheduler's clock, need no clock of the engines'. A ``"silent"`` event names the
tasks the scheduler has placed on that worker (``"waiting"``; told again when
more land there), so an engine moves those that have not started; and the
scheduler pauses the worker while it is silent (as it pauses a worker short of
memory): it then places nothing new there and its work stealing takes nothing
there (an idle frozen worker is the first thief otherwise).

And it lets the scheduler forget old spans. Dask starts a new ``("default",)``
span whenever tasks arrive after all earlier ones have ended, and keeps every
span, with its task groups, for the scheduler's life (distributed#7977): a
search's trials each left one, about 7 kB, in the embedded scheduler of the
driver. Done default spans whose task groups the scheduler has forgotten go, but
the newest ``SPANS_KEPT``; spans a user named (``distributed.span``) stay.

This module imports nothing of hrl_tasks: it travels to the scheduler by value
(cloudpickle), so a scheduler that does not have hrl_tasks installed takes it.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import SchedulerPlugin

TOPIC = "hrl-tasks-workers"
NAME = "hrl-tasks-worker-events"
ACTIONS = ("add-worker", "remove-worker")
SILENT_S = 3.0  # heartbeats this far behind the other workers' (and five heartbeats)
CHECK_S = 1.0  # how often the lags are looked at
WAITING_TOLD = 10_000  # the most task keys a "silent" event names
SPANS_KEPT = 100  # done default spans kept, the newest
SPANS_CHECK_S = 10.0  # how often old spans are looked for


class WorkerEvents(SchedulerPlugin):
    """Copies ``add-worker`` and ``remove-worker`` from the ``"all"`` topic to :data:`TOPIC`,
    and tells there which workers stop reporting and report again."""

    name = NAME
    idempotent = True  # one per scheduler, whichever engine registers it first

    def __init__(self) -> None:
        self.scheduler = None
        self.silent: dict = {}  # address -> the keys told as waiting there
        self.paused: set = set()  # the silent workers this plugin paused
        self.spans_forgotten = 0  # how many old spans the scheduler was let forget

    async def start(self, scheduler) -> None:
        from tornado.ioloop import PeriodicCallback

        self.scheduler = scheduler
        self.silent, self.paused = {}, set()
        for name, callback, seconds in (
            (NAME, self.look_for_silent, CHECK_S),
            (f"{NAME}-spans", self.forget_old_spans, SPANS_CHECK_S),
        ):
            check = PeriodicCallback(callback, seconds * 1000)
            scheduler.periodic_callbacks[name] = check  # stopped with the scheduler
            check.start()

    def look_for_silent(self) -> None:
        """Tell the workers that stopped reporting (and the tasks placed there), and
        those that report again; pause the first while they are silent."""
        from distributed.scheduler import heartbeat_interval

        workers = self.scheduler.workers
        seen = {ws.address: ws.last_seen for ws in workers.values()}
        silent = set()
        if len(seen) >= 2:
            bound = max(SILENT_S, 5 * heartbeat_interval(len(seen)))
            latest = max(seen.values())
            silent = {address for address, last in seen.items() if latest - last > bound}
        for address in sorted(silent):
            first = address not in self.silent
            if first:
                self.silent[address] = set()
                self._pause(address)
            waiting = {ts.key for ts in workers[address].processing if isinstance(ts.key, str)}
            new = waiting - self.silent[address]
            if first or new:
                self.silent[address] |= new
                self.scheduler.log_event(
                    TOPIC,
                    {"action": "silent", "worker": address, "waiting": sorted(new)[:WAITING_TOLD]},
                )
        for address in sorted(set(self.silent) - silent):
            del self.silent[address]
            if address in seen:
                self._resume(address)
                self.scheduler.log_event(TOPIC, {"action": "reporting", "worker": address})
            self.paused.discard(address)

    def forget_old_spans(self) -> int:
        """Drop the done default spans but the newest ``SPANS_KEPT`` from the scheduler's
        spans extension (its tables, as distributed 2024.8 to 2026.8 lay them out).
        Returns how many went (``spans_forgotten`` counts them all)."""
        spans = self.scheduler.extensions.get("spans")
        defaults = [] if spans is None else spans.spans_search_by_name.get(("default",), [])
        if len(defaults) <= SPANS_KEPT:
            return 0
        groups = self.scheduler.task_groups
        gone = {
            span.id
            for span in defaults[:-SPANS_KEPT]
            if not span.children and all(groups.get(g.name) is not g for g in span.groups)
        }
        for span_id in gone:
            del spans.spans[span_id]
        spans.root_spans[:] = [s for s in spans.root_spans if s.id not in gone]
        for table in (spans.spans_search_by_name, spans.spans_search_by_tag):
            for name in [n for n, found in table.items() if any(s.id in gone for s in found)]:
                table[name] = [s for s in table[name] if s.id not in gone]
        self.spans_forgotten += len(gone)
        return len(gone)

    def _pause(self, address: str) -> None:
        # The scheduler's own handler of a worker's "worker-status-change" message (by
        # the status's name: distributed.core.Status is internal).
        if self.scheduler.workers[address].status.name == "running":
            self.scheduler.handle_worker_status_change("paused", address, "hrl-silent")
            self.paused.add(address)

    def _resume(self, address: str) -> None:
        if address in self.paused and self.scheduler.workers[address].status.name == "paused":
            self.scheduler.handle_worker_status_change("running", address, "hrl-reporting")

    def log_event(self, topic, msg) -> None:
        if topic != "all" or self.scheduler is None or not isinstance(msg, dict):
            return
        if msg.get("action") in ACTIONS:
            self.scheduler.log_event(
                TOPIC,
                {
                    "action": msg["action"],
                    "worker": str(msg.get("worker", "")),
                    "expected": bool(msg.get("expected", False)),
                },
            )


def register(client) -> None:
    """Put the plugin on ``client``'s scheduler (once; an engine already did: nothing)."""
    register_by_value(client, WorkerEvents(), NAME)


def register_by_value(client, plugin, name: str) -> None:
    """Register a scheduler ``plugin`` whose module travels with it by value
    (cloudpickle), so that a scheduler without hrl_tasks installed takes it."""
    import sys

    import cloudpickle

    module = sys.modules[type(plugin).__module__]
    by_value = module.__name__ in cloudpickle.list_registry_pickle_by_value()
    if not by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        client.register_plugin(plugin, name=name)
    finally:
        if not by_value:
            cloudpickle.unregister_pickle_by_value(module)
