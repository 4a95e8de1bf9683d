"""PPO: proximal policy optimization, discrete and continuous actions."""

from hrl_tasks.algorithms.ppo.config import PPOConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("PPO",)})  # the plan imports torch

__all__ = ["PPO", "PPOConfig"]
