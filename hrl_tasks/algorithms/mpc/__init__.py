"""MPC with a learned model (PETS): a probabilistic dynamics ensemble and a CEM planner
whose candidate evaluations are split into nested tasks."""

from hrl_tasks.algorithms.mpc.config import MPCConfig
from hrl_tasks.algorithms.mpc.model import DynamicsEnsemble, EnsembleSpec
from hrl_tasks.algorithms.mpc.plan import MPC
from hrl_tasks.algorithms.mpc.planner import CEMConfig, CEMPlanner, EnsembleRollouts

__all__ = [
    "CEMConfig",
    "CEMPlanner",
    "DynamicsEnsemble",
    "EnsembleRollouts",
    "EnsembleSpec",
    "MPC",
    "MPCConfig",
]
