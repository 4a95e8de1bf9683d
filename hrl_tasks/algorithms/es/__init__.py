"""ES: evolution strategies (Salimans et al. 2017), perturbations evaluated as pure tasks."""

from hrl_tasks.algorithms.es.config import ESConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {"plan": ("ES",)})  # the plan imports torch

__all__ = ["ES", "ESConfig"]
