"""PPO: proximal policy optimization, discrete and continuous actions."""

from hrl_tasks.algorithms.ppo.config import PPOConfig
from hrl_tasks.algorithms.ppo.plan import PPO

__all__ = ["PPO", "PPOConfig"]
