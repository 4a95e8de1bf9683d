"""DQN's flat config: shared keys, the policy's keys, replay and schedule keys."""

from dataclasses import dataclass

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.policies.dqn import DQNConfig as DQNPolicyConfig


@dataclass
class DQNConfig(AlgorithmConfig, DQNPolicyConfig):
    """Every key of DQN; the policy keys are those of ``hrl_tasks.policies.DQNConfig``.

    Defaults follow rl-zoo's CartPole-v1 DQN (rounds of 256 env steps, each
    followed by 128 gradient steps on replayed batches of 64) except the
    learning rate: 5e-4, where rl-zoo's 2.3e-3 oscillated (docs/learning.md).
    """

    rollout_fragment_length: int = 32
    buffer_size: int = 100_000
    """Rows the replay buffer keeps."""
    learning_starts: int = 1000
    """Rows in the buffer before learning starts."""
    train_batch_size: int = 64
    """Rows per gradient step."""
    train_steps_per_round: int = 128
    """Gradient steps after each sampling round (every worker's fragment)."""
    target_update_every: int = 128
    """Gradient steps between copies of the online network into the target network."""
    epsilon_start: float = 1.0
    """Exploration epsilon at the start..."""
    epsilon_end: float = 0.04
    """...and after epsilon_steps env steps."""
    epsilon_steps: int = 8000
    """Env steps over which epsilon moves linearly from start to end."""
    prioritized_replay: bool = False
    """Sample rows by TD error (Schaul et al. 2016) instead of uniformly."""
    prioritized_alpha: float = 0.6
    """How strongly priorities shape sampling (0 is uniform)."""
    prioritized_beta: float = 0.4
    """Importance-sampling correction of prioritized replay."""
    min_steps_per_report: int = 1000
    """Env steps per train() iteration."""
    lr: float = 5e-4
    hidden: tuple[int, ...] = (256, 256)
