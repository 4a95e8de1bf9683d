"""Rollouts: `RolloutWorker` (a vector env plus a policy copy) and `WorkerSet`.

Env creation lives in `hrl_tasks.envs`; its names are re-exported here for the imports
that found them here (``from hrl_tasks.rollout import make_env``).
"""

from hrl_tasks import envs
from hrl_tasks.envs import *  # noqa: F403  (the re-export above)
from hrl_tasks.rollout.worker import RolloutWorker, derive_seed
from hrl_tasks.rollout.worker_set import WorkerSet

__all__ = [*envs.__all__, "RolloutWorker", "WorkerSet", "derive_seed"]
