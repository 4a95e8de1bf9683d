"""PPO's flat config: the shared keys, the policy's keys, and the batch size."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.configs import PPOPolicyConfig


@dataclass
class PPOConfig(AlgorithmConfig, PPOPolicyConfig):
    """Every key of PPO; the policy keys are those of ``hrl_tasks.policies.PPOConfig``."""

    train_batch_size: int = 512
    """Env steps per learner update (sampled from all workers, concatenated)."""
    overlap_sampling: bool = True
    """Workers sample the next batch while the driver learns on this one. That batch
    is one update behind; PPO's ratio uses its behaviour log-probabilities, so the
    update stays correct (as in asynchronous PPO variants)."""
    lr: float = 1e-3
    gamma: float = 0.99
    lam: float = 0.95
    num_sgd_iter: int = 10
    minibatch_size: int = 128
    ent_coef: float = 0.0
    central_critic: bool = False
    """Multi-agent envs: the value function sees every agent's observation (or the
    env's ``state()``), the policy only its own: MAPPO's centralized critic (Yu et
    al. 2022). Acting needs only the agent's own observation."""

    BOUNDS: ClassVar[dict[str, str]] = {"train_batch_size": ">= 1"}
