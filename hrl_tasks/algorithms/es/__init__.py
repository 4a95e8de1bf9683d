"""ES: evolution strategies (Salimans et al. 2017), perturbations evaluated as pure tasks."""

from hrl_tasks.algorithms.es.config import ESConfig
from hrl_tasks.algorithms.es.plan import ES

__all__ = ["ES", "ESConfig"]
