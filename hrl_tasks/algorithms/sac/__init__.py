"""SAC: soft actor-critic with twin Q and a tuned temperature, Box and Discrete actions."""

from hrl_tasks.algorithms.sac.config import SACConfig
from hrl_tasks.algorithms.sac.plan import SAC

__all__ = ["SAC", "SACConfig"]
