"""hrl_tasks: distributed reinforcement learning on Dask."""

__version__ = "0.1.0"

from hrl_tasks.scheduler import (  # noqa: E402
    Engine,
    EngineError,
    ObjectStartError,
    ResourceError,
    RetryPolicy,
    SchedulerLostError,
    Shared,
    SpeculationPolicy,
    SyncEngine,
    TaskRef,
    WorkerGroup,
    WorkerHandle,
    WorkerLostError,
    current_engine,
    task_context,
    worker_local,
)


def train(algorithm: str, env: str, stop=None, engine=None, callback=None, **config):
    """Train ``algorithm`` on ``env`` until ``stop``; see :func:`hrl_tasks.algorithms.train`."""
    from hrl_tasks.algorithms import train as train_algorithm

    return train_algorithm(algorithm, env, stop=stop, engine=engine, callback=callback, **config)


__all__ = [
    "Engine",
    "EngineError",
    "ObjectStartError",
    "ResourceError",
    "RetryPolicy",
    "Shared",
    "SpeculationPolicy",
    "SyncEngine",
    "TaskRef",
    "WorkerGroup",
    "WorkerHandle",
    "SchedulerLostError",
    "WorkerLostError",
    "__version__",
    "current_engine",
    "task_context",
    "train",
    "worker_local",
]
