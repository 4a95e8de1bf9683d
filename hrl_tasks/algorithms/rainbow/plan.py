"""Rainbow's plan: DQN's (`hrl_tasks.algorithms.dqn.plan`) with Rainbow's defaults."""

from hrl_tasks.algorithms.dqn.plan import DQN
from hrl_tasks.algorithms.rainbow.config import RainbowConfig


class Rainbow(DQN):
    """DQN with double Q, dueling, n-step, prioritized replay, C51 and noisy nets on
    (`RainbowConfig`); the plan is DQN's."""

    name = "rainbow"
    config_class = RainbowConfig
