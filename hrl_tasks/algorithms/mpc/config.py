"""MPC's flat config: the dynamics ensemble, its training, data collection and the CEM planner."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError


@dataclass
class MPCConfig(AlgorithmConfig):
    """Every key of MPC (PETS). The env is stepped in the driver; ``num_workers`` counts
    the embedded cluster's worker processes, where the planner's candidate evaluations
    run as tasks (with ``planner_tasks`` > 0). The rollout keys of the other algorithms
    (``num_envs_per_worker``, ``rollout_fragment_length``, ``direct_calls``) are not used."""

    samples_with_rollout_workers: ClassVar[bool] = False

    env: str = "Pendulum-v1"
    metrics_smoothing_episodes: int = 10
    # --- the dynamics model: a probabilistic ensemble ---
    ensemble_size: int = 5
    """Members of the ensemble, each trained on its own bootstrap of the data."""
    hidden: tuple[int, ...] = (200, 200)
    """Hidden widths of each member's MLP (SiLU activations)."""
    lr: float = 1e-3
    weight_decay: float = 5e-5
    train_batch_size: int = 256
    """Transitions per member and gradient step."""
    updates_per_iteration: int = 200
    """Gradient steps on the ensemble after each iteration's data is added."""
    buffer_size: int = 100_000
    """Transitions kept (the oldest go first); they are kept in checkpoints."""
    # --- data collection ---
    steps_per_iteration: int = 200
    """Env steps collected with the planner per iteration (200: one Pendulum episode)."""
    random_steps: int = 400
    """Env steps with uniformly random actions before the first plan (first iteration)."""
    # --- the planner: CEM over action sequences ---
    horizon: int = 25
    """Steps of each planned action sequence."""
    population: int = 400
    """Candidate sequences per CEM iteration."""
    elites: int = 40
    """Best candidates that refit the sampling distribution."""
    cem_iterations: int = 5
    cem_alpha: float = 0.1
    """Weight of the old distribution in each refit (PETS: 0.1)."""
    particles: int = 1
    """Model rollouts per candidate (trajectory sampling TS1: each particle goes through a
    member drawn at random at each step; a candidate's return is its particles' mean)."""
    planner_tasks: int = 0
    """Tasks the candidate evaluations of one CEM iteration are split into, on the engine
    (0: evaluated in the driver, and no cluster is started unless an engine is given).
    A plan is latency-bound (cem_iterations rounds per env step): on a 2-core machine the
    default plan took 0.11 s in the driver and 0.36 s as 2 tasks on 2 workers; tasks pay
    off with larger populations or models, or more cores than the driver has."""
    threads_per_worker: int = 1
    """Threads of each worker process of the embedded cluster."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "ensemble_size": ">= 1",
        "hidden": ">= 1",
        "lr": "> 0",
        "weight_decay": ">= 0",
        "train_batch_size": ">= 1",
        "updates_per_iteration": ">= 0",
        "buffer_size": ">= 1",
        "steps_per_iteration": ">= 1",
        "random_steps": ">= 0",
        "horizon": ">= 1",
        "population": ">= 2",
        "elites": ">= 1",
        "cem_iterations": ">= 1",
        "cem_alpha": "[0, 1)",
        "particles": ">= 1",
        "planner_tasks": ">= 0",
        "threads_per_worker": ">= 1",
    }

    def embedded_cluster(self) -> dict[str, int] | None:
        """Pure; see `AlgorithmConfig.embedded_cluster`: none without planner tasks
        (the driver plans alone, on a `SyncEngine`), else ``threads_per_worker``
        threads in each worker process."""
        if self.planner_tasks == 0:
            return None
        return {**super().embedded_cluster(), "threads_per_worker": self.threads_per_worker}

    def check(self) -> None:
        super().check()
        if self.elites > self.population:
            raise ConfigError(
                f"MPCConfig.elites must be <= population ({self.population}), got {self.elites}"
            )
        if self.planner_tasks > self.population:
            raise ConfigError(
                f"MPCConfig.planner_tasks must be <= population ({self.population}), "
                f"got {self.planner_tasks}: a task would have no candidate"
            )
