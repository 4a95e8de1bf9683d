"""IMPALA's flat config: the shared keys, the V-trace policy's keys, and the learner's queue."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.impala import IMPALAConfig as IMPALAPolicyConfig


@dataclass
class IMPALAConfig(AlgorithmConfig, IMPALAPolicyConfig):
    """Every key of IMPALA; the policy keys are those of ``hrl_tasks.policies.IMPALAConfig``.

    ``rollout_fragment_length`` is both the steps per env of a sample call and the
    fragment length the policy splits its batches by (a worker's batch is one
    time-ordered fragment per env, concatenated).
    """

    num_async: int = 2
    """Sample requests in flight per rollout worker."""
    train_batch_size: int = 256
    """Env steps per learner step: sampled batches are concatenated until they hold
    at least this many (a batch has num_envs_per_worker * rollout_fragment_length)."""
    learner_queue_size: int = 4
    """Sampled batches waiting for the learner thread; when full, sampling waits."""
    min_steps_per_report: int = 1024
    """Env steps sampled per train() iteration."""
    rollout_fragment_length: int = 32
    lr: float = 1e-3
    """Adam step size (the policy's default is 5e-4; 1e-3 solved CartPole-v1 faster here)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (the policy's default is 0.01)."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # sampling is asynchronous: remote workers only
        "num_async": ">= 1",
        "train_batch_size": ">= 1",
        "learner_queue_size": ">= 1",
        "min_steps_per_report": ">= 0",
    }
