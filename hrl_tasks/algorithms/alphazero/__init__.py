"""AlphaZero: self-play games as tasks, each move a (nested) tree search; PettingZoo board games."""

from hrl_tasks.algorithms.alphazero.config import AlphaZeroConfig
from hrl_tasks.algorithms.alphazero.plan import AlphaZero

__all__ = ["AlphaZero", "AlphaZeroConfig"]
