"""Workers coming and going, told to the engines on a topic of their own.

The scheduler logs a worker's arrival and departure to its ``"all"`` topic,
together with everything else; some of what else it logs there cannot be sent
to a client (``Scheduler.replicate`` logs ``WorkerState`` objects, which break
the connection of every client subscribed to ``"all"``). So the engines do not
subscribe to it: this scheduler plugin copies the two events they need, as
plain data, to :data:`TOPIC`.

This module imports nothing of hrl_tasks: it travels to the scheduler by value
(cloudpickle), so a scheduler that does not have hrl_tasks installed takes it.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import SchedulerPlugin

TOPIC = "hrl-tasks-workers"
NAME = "hrl-tasks-worker-events"
ACTIONS = ("add-worker", "remove-worker")


class WorkerEvents(SchedulerPlugin):
    """Copies ``add-worker`` and ``remove-worker`` from the ``"all"`` topic to :data:`TOPIC`."""

    name = NAME
    idempotent = True  # one per scheduler, whichever engine registers it first

    def __init__(self) -> None:
        self.scheduler = None

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def log_event(self, topic, msg) -> None:
        if topic != "all" or self.scheduler is None or not isinstance(msg, dict):
            return
        if msg.get("action") in ACTIONS:
            self.scheduler.log_event(TOPIC, {
                "action": msg["action"],
                "worker": str(msg.get("worker", "")),
                "expected": bool(msg.get("expected", False)),
            })  # fmt: skip


def register(client) -> None:
    """Put the plugin on ``client``'s scheduler (once; an engine already did: nothing)."""
    import cloudpickle

    import hrl_tasks.scheduler.worker_events as this

    by_value = this.__name__ in cloudpickle.list_registry_pickle_by_value()
    if not by_value:
        cloudpickle.register_pickle_by_value(this)
    try:
        client.register_plugin(WorkerEvents(), name=NAME)
    finally:
        if not by_value:
            cloudpickle.unregister_pickle_by_value(this)
