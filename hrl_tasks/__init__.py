"""hrl_tasks: distributed reinforcement learning on Dask."""

from hrl_tasks.version import __version__

# The engine's names load on first use (PEP 562), so that ``import hrl_tasks`` and the
# command line's help and usage errors import neither distributed nor torch.
ENGINE_NAMES = (
    "DeadlineReached",
    "Engine",
    "EngineError",
    "InputFailedError",
    "ObjectStartError",
    "ResourceError",
    "RetryPolicy",
    "SchedulerLostError",
    "Shared",
    "SpeculationPolicy",
    "SyncEngine",
    "TaskRef",
    "WorkerGroup",
    "WorkerHandle",
    "WorkerLostError",
    "current_engine",
    "task_context",
    "worker_local",
)


def __getattr__(name: str):
    if name in ENGINE_NAMES:
        from hrl_tasks import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module 'hrl_tasks' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *ENGINE_NAMES])


def train(algorithm: str, env: str, stop=None, engine=None, callback=None, **config):
    """Train ``algorithm`` on ``env`` until ``stop``; see :func:`hrl_tasks.algorithms.train`."""
    from hrl_tasks.algorithms import train as train_algorithm

    return train_algorithm(algorithm, env, stop=stop, engine=engine, callback=callback, **config)


def load(path, *, train: bool = False, engine=None, env=None, config=None, trust_env_modules=False):
    """Restore any algorithm from a checkpoint or run directory, ready to act (no cluster
    unless ``train``); see :func:`hrl_tasks.algorithms.load`."""
    from hrl_tasks.algorithms import load as load_algorithm

    return load_algorithm(
        path,
        train=train,
        engine=engine,
        env=env,
        config=config,
        trust_env_modules=trust_env_modules,
    )


def tune(algorithm: str, env=None, space=None, config=None, **options):
    """Search ``space`` for the best config of ``algorithm`` on ``env``, every trial a
    task on the same cluster; see :func:`hrl_tasks.tuning.runner.tune`."""
    from hrl_tasks.tuning.runner import tune as run_search

    return run_search(algorithm, env, space, config, **options)


__all__ = [*ENGINE_NAMES, "__version__", "load", "train", "tune"]
