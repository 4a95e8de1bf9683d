"""hrl_tasks: distributed reinforcement learning on Dask."""

__version__ = "0.1.0"

from hrl_tasks.scheduler import (  # noqa: E402
    Engine,
    EngineError,
    ObjectStartError,
    ResourceError,
    RetryPolicy,
    SpeculationPolicy,
    SyncEngine,
    TaskRef,
    WorkerGroup,
    WorkerHandle,
    WorkerLostError,
    current_engine,
    task_context,
)

__all__ = [
    "Engine",
    "EngineError",
    "ObjectStartError",
    "ResourceError",
    "RetryPolicy",
    "SpeculationPolicy",
    "SyncEngine",
    "TaskRef",
    "WorkerGroup",
    "WorkerHandle",
    "WorkerLostError",
    "__version__",
    "current_engine",
    "task_context",
]
