"""DQN's flat config: shared keys, the policy's keys, replay and schedule keys."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig
from hrl_tasks.algorithms.replay_learning import ReplayConfig
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies.configs import DQNPolicyConfig


@dataclass
class DQNConfig(AlgorithmConfig, ReplayConfig, DQNPolicyConfig):
    """Every key of DQN; the policy keys are those of ``hrl_tasks.policies.DQNConfig``,
    the replay keys those of ``hrl_tasks.algorithms.replay_learning.ReplayConfig``.

    Defaults follow rl-zoo's CartPole-v1 DQN (rounds of 256 env steps, each
    followed by 128 gradient steps on replayed batches of 64) except the
    learning rate: 5e-4, where rl-zoo's 2.3e-3 oscillated (docs/learning.md).
    """

    rollout_fragment_length: int = 32
    target_update_every: int = 128
    """Gradient steps between copies of the online network into the target network."""
    epsilon_start: float = 1.0
    """Exploration epsilon at the start..."""
    epsilon_end: float = 0.04
    """...and after epsilon_steps env steps."""
    epsilon_steps: int = 8000
    """Env steps over which epsilon moves linearly from start to end."""
    lr: float = 5e-4
    hidden: tuple[int, ...] = (256, 256)

    BOUNDS: ClassVar[dict[str, str]] = {
        "target_update_every": ">= 1",
        "epsilon_start": "[0, 1]",
        "epsilon_end": "[0, 1]",
        "epsilon_steps": ">= 0",
    }

    def check(self) -> None:
        super().check()
        self.check_buffer()
        self.check_replay()
        self.check_support()

    def check_support(self) -> None:
        """A distributional head (``num_atoms > 1``) needs ``v_min < v_max``."""
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            raise ConfigError(
                f"v_min={self.v_min:g} must be below v_max={self.v_max:g}: they bound the "
                f"returns that num_atoms={self.num_atoms} atoms cover (e.g. --set v_min=-10 --set v_max=10)"
            )
