"""A2C's flat config."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.configs import PGPolicyConfig


@dataclass
class A2CConfig(AlgorithmConfig, PGPolicyConfig):
    """Every key of A2C; the policy keys are those of ``hrl_tasks.policies.PGConfig``."""

    train_batch_size: int = 256
    """Env steps per gradient step."""
    rollout_fragment_length: int = 16

    BOUNDS: ClassVar[dict[str, str]] = {"train_batch_size": ">= 1"}
