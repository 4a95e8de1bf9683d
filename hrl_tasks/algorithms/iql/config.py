"""IQL's flat config: the policy's keys (expectile, beta) and the offline keys."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.offline_config import OfflineConfig
from hrl_tasks.policies.configs import IQLPolicyConfig


@dataclass
class IQLConfig(AlgorithmConfig, IQLPolicyConfig, OfflineConfig):
    """Every key of IQL; ``num_workers`` counts the worker processes that read the
    experience (there are no rollout workers)."""

    samples_with_rollout_workers: ClassVar[bool] = False

    train_batch_size: int = 256
    """Rows per gradient step (the paper's and d3rlpy's)."""
    num_workers: int = 1
    updates_per_iteration: int = 1000
    learner_threads: int | None = None
    """torch's threads of the learner; None: a thread per core (the driver only learns:
    the workers read the files)."""

    BOUNDS: ClassVar[dict[str, str]] = {"train_batch_size": ">= 1"}

    def check(self) -> None:
        super().check()
        self.check_offline()
