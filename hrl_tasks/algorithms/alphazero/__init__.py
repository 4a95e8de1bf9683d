"""AlphaZero: self-play games as tasks, each move a (nested) tree search; PettingZoo board games."""

from hrl_tasks.algorithms.alphazero.config import AlphaZeroConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("AlphaZero",)})  # the plan imports torch

__all__ = ["AlphaZero", "AlphaZeroConfig"]
