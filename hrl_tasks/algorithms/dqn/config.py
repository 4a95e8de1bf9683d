"""DQN's flat config: shared keys, the policy's keys, replay and schedule keys."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
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

    BOUNDS: ClassVar[dict[str, str]] = {
        "buffer_size": ">= 1",
        "learning_starts": ">= 0",
        "train_batch_size": ">= 1",
        "train_steps_per_round": ">= 1",  # 0 would never train, and train() would wait forever
        "target_update_every": ">= 1",
        "epsilon_start": "[0, 1]",
        "epsilon_end": "[0, 1]",
        "epsilon_steps": ">= 0",
        "prioritized_alpha": ">= 0",
        "prioritized_beta": "[0, 1]",
        "min_steps_per_report": ">= 0",
    }

    def check(self) -> None:
        """Replay starts once the buffer holds ``max(learning_starts, train_batch_size)``
        rows: a buffer of ``buffer_size`` rows must be able to."""
        super().check()
        for key in ("learning_starts", "train_batch_size"):
            if getattr(self, key) > self.buffer_size:
                raise ConfigError(
                    f"{type(self).__name__}.{key} must be <= buffer_size ({self.buffer_size}), "
                    f"got {getattr(self, key)}: replay would never start"
                )
