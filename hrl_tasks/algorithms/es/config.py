"""ES's flat config: the shared keys, the policy's and noise table's keys, and the rounds."""

from dataclasses import dataclass

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.algorithms.es.evaluate import NoiseTableConfig


@dataclass
class ESConfig(AlgorithmConfig, NoiseTableConfig):
    """Every key of ES; the policy keys are those of ``hrl_tasks.policies.ESConfig``.

    ES has no rollout workers: ``num_envs_per_worker`` and
    ``rollout_fragment_length`` are unused, and each perturbation is a task.
    """

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

    def __post_init__(self):
        for key in ("num_perturbations", "episodes_per_perturbation"):
            if getattr(self, key) < 1:
                raise ConfigError(f"ESConfig.{key} must be >= 1, got {getattr(self, key)}")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ConfigError("ESConfig.max_episode_steps must be >= 1 or None")
