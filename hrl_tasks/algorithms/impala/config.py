"""IMPALA's flat config: the shared keys, the V-trace policy's keys, and the learner's queue."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.configs import IMPALAPolicyConfig


@dataclass
class IMPALAConfig(AlgorithmConfig, IMPALAPolicyConfig):
    """Every key of IMPALA; the policy keys are those of ``hrl_tasks.policies.IMPALAConfig``.

    ``rollout_fragment_length`` is both the steps per env of a sample call and the
    fragment length the policy splits its batches by (a worker's batch is one
    time-ordered fragment per env, concatenated).
    """

    num_learners: int = 0
    """0 (the default): the learner is a thread in the driver, every batch passing
    through the driver's process. 1: the learner in a process of its own, fed by the
    rollout workers without the driver (`hrl_tasks.rollout.async_learner`): each batch
    goes from its rollout worker to the learner, the driver passing a reference (needs
    ``direct_calls``); the learner's weights come back with its replies. On this
    project's 2-core machine that trained 0.73-0.93x the env steps per second of the
    learner thread and took more wall time to learn CartPole (docs/benchmarks.md,
    2026-11-29): three busy processes on two cores. 2 or more: a data-parallel learner
    group fed by the driver's learner thread."""
    broadcast_interval: int = 1
    """With ``num_learners=1``: learner updates between two weight broadcasts to the
    rollout workers (RLlib's ``broadcast_interval``)."""
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
        "broadcast_interval": ">= 1",
        "train_batch_size": ">= 1",
        "learner_queue_size": ">= 1",
        "min_steps_per_report": ">= 0",
    }
