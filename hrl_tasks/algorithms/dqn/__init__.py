"""DQN: double, dueling, n-step, prioritized replay."""

from hrl_tasks.algorithms.dqn.config import DQNConfig
from hrl_tasks.algorithms.dqn.plan import DQN

__all__ = ["DQN", "DQNConfig"]
