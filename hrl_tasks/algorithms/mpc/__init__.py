"""MPC with a learned model (PETS): a probabilistic dynamics ensemble and a CEM planner
whose candidate evaluations are split into nested tasks."""

from hrl_tasks.algorithms.mpc.config import MPCConfig
from hrl_tasks.lazy import lazy_names

__getattr__, __dir__ = lazy_names(  # the model and the plan import torch
    __name__,
    {
        "model": ("DynamicsEnsemble", "EnsembleSpec"),
        "plan": ("MPC",),
        "planner": ("CEMConfig", "CEMPlanner", "EnsembleRollouts"),
    },
)

__all__ = [
    "CEMConfig",
    "CEMPlanner",
    "DynamicsEnsemble",
    "EnsembleRollouts",
    "EnsembleSpec",
    "MPC",
    "MPCConfig",
]
