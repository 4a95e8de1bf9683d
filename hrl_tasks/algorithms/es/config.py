"""ES's flat config: the shared keys, the policy's and noise table's keys, and the rounds."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.configs import ESPolicyConfig


@dataclass
class NoiseTableConfig(ESPolicyConfig):
    """`ESPolicy`'s keys plus the shared noise table's."""

    noise_table_size: int = 10_000_000
    """float32 entries of the shared noise table (40 MB at 10M; the paper used 25M)."""
    noise_table_seed: int = 123
    """Seed of the noise table (the same table in every process)."""


@dataclass
class ESConfig(AlgorithmConfig, NoiseTableConfig):
    """Every key of ES; the policy keys are those of ``hrl_tasks.policies.ESConfig``.

    ES has no rollout workers: ``num_envs_per_worker`` and
    ``rollout_fragment_length`` are unused, and each perturbation is a task.
    """

    samples_with_rollout_workers: ClassVar[bool] = False

    num_workers: int = 2
    """Worker processes of the embedded cluster (when no engine is given); the
    perturbation tasks spread over the engine's workers, whatever their number."""
    num_perturbations: int = 32
    """Antithetic pairs per iteration: one task each, evaluating theta + sigma eps and
    theta - sigma eps, so twice as many perturbed policies (and episodes)."""
    episodes_per_perturbation: int = 1
    """Episodes per perturbed policy (their mean return is its fitness)."""
    max_episode_steps: int | None = None
    """Cap on an evaluation episode's steps; None keeps the env's own time limit."""
    theta_eval_episodes: int = 1
    """Episodes of the unperturbed policy per iteration, run with the perturbations
    and reported as ``info["theta_return_mean"]``; 0 runs none."""
    lr: float = 0.01
    noise_stdev: float = 0.02
    l2_coeff: float = 0.005

    BOUNDS: ClassVar[dict[str, str]] = {
        "noise_table_size": ">= 1",  # and at least the policy's parameters (checked by it)
        "noise_table_seed": ">= 0",
        "num_perturbations": ">= 1",
        "episodes_per_perturbation": ">= 1",
        "max_episode_steps": ">= 1",
        "theta_eval_episodes": ">= 0",
    }
