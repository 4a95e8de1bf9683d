"""The flat configs of MARWIL and BC: the policy's keys and where the experience is."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.offline_config import OfflineConfig
from hrl_tasks.policies.configs import MARWILPolicyConfig


@dataclass
class MARWILConfig(AlgorithmConfig, MARWILPolicyConfig, OfflineConfig):
    """Every key of MARWIL; ``num_workers`` counts the worker processes that read the
    experience (there are no rollout workers)."""

    samples_with_rollout_workers: ClassVar[bool] = False

    train_batch_size: int = 512
    """Rows per gradient step."""
    num_workers: int = 1

    BOUNDS: ClassVar[dict[str, str]] = {"train_batch_size": ">= 1"}

    def check(self) -> None:
        super().check()
        self.check_offline()


@dataclass
class BCConfig(MARWILConfig):
    """Every key of behaviour cloning: MARWIL with ``beta`` 0 (every action imitated
    alike; no critic learned)."""

    beta: float = 0.0

    def check(self) -> None:
        super().check()
        if self.beta != 0:
            raise ConfigError(f"BCConfig.beta must be 0 (use marwil for beta > 0), got {self.beta}")
