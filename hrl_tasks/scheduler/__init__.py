"""The engine: resource-aware tasks, nested tasks and stateful workers on Dask.

Importing it installs the hook through which the package's codecs register on first use
(`hrl_tasks.scheduler.serialization`).
"""

from hrl_tasks.scheduler.context import TaskContext, current_task
from hrl_tasks.scheduler.engine import Engine, current_engine, worker_local
from hrl_tasks.scheduler.errors import (
    EngineError,
    InputFailedError,
    ObjectStartError,
    ResourceError,
    SchedulerLostError,
    WorkerLostError,
)
from hrl_tasks.scheduler.faults import InjectedFault, clear_faults, inject_faults, kill_worker_after
from hrl_tasks.scheduler.handles import WorkerGroup, WorkerHandle
from hrl_tasks.scheduler.resources import Ledger
from hrl_tasks.scheduler.retry import RetryPolicy
from hrl_tasks.scheduler.serialization import register_serializer
from hrl_tasks.scheduler.shared import Shared
from hrl_tasks.scheduler.speculation import SpeculationPolicy
from hrl_tasks.scheduler.sync import SyncEngine
from hrl_tasks.scheduler.taskref import TaskRef
from hrl_tasks.scheduler.validate import InvalidState
from hrl_tasks.scheduler.watch import DeadlineReached

__all__ = [
    "DeadlineReached",
    "Engine",
    "EngineError",
    "Ledger",
    "InputFailedError",
    "ObjectStartError",
    "ResourceError",
    "RetryPolicy",
    "Shared",
    "SyncEngine",
    "TaskContext",
    "TaskRef",
    "WorkerGroup",
    "WorkerHandle",
    "InjectedFault",
    "InvalidState",
    "SpeculationPolicy",
    "clear_faults",
    "register_serializer",
    "inject_faults",
    "kill_worker_after",
    "SchedulerLostError",
    "WorkerLostError",
    "current_engine",
    "task_context",
    "worker_local",
]


def task_context() -> TaskContext:
    """What the running task knows about itself (name, attempt, resources).

    Raises:
        RuntimeError: outside an engine task.
    """
    ctx = current_task()
    if ctx is None:
        raise RuntimeError("task_context() is only available inside a task run by the engine")
    return ctx
