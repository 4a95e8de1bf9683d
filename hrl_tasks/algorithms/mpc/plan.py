"""MPC with a learned model: PETS (Chua et al. 2018, arXiv:1805.12114) on a Dask cluster.

One iteration, as `MPC.train` reads::

    (first iteration) random_steps env steps with random actions; fit the ensemble
    params   = engine.put(ensemble weights and normalisers)       # once per iteration
    for steps_per_iteration env steps, in the driver:
        action = CEM plan from the observation                    # each CEM iteration's
                                                                  # candidates: planner_tasks tasks
        env.step(action); dataset += transition
    report the model's error on these new transitions (held out until now)
    fit the ensemble: updates_per_iteration steps on bootstraps of the dataset

The env is stepped in the driver, one plan per step; the planning is what goes to the
cluster. The dataset (at most ``buffer_size`` transitions) is kept in checkpoints, so a
resumed run continues on the same data; an episode running at the save is not.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.mpc.config import MPCConfig
from hrl_tasks.algorithms.mpc.model import DynamicsEnsemble, EnsembleSpec, as_tensors
from hrl_tasks.algorithms.mpc.planner import CEMConfig, CEMPlanner, EnsembleRollouts
from hrl_tasks.data.rng import generator_from_state, generator_state
from hrl_tasks.envs.make import env_creator
from hrl_tasks.flow import FlowContext
from hrl_tasks.scheduler import Engine, SyncEngine

STEPS = "env_steps_sampled"


class MPC(Algorithm):
    """PETS: a probabilistic ensemble of dynamics models and a CEM planner over it.

    Example::

        algo = MPC({"env": "Pendulum-v1"})
        while (result := algo.train())["episode_return_mean"] < -200:  # NaN: no episode yet
            print(result["env_steps_sampled"], result["episode_return_mean"])

    Without an engine and with ``planner_tasks=0`` (the default) nothing is started:
    the plans run in the driver on an in-process `SyncEngine`. With ``planner_tasks``
    > 0 an embedded cluster of ``num_workers`` processes evaluates the candidates.
    """

    name = "mpc"
    config_class = MPCConfig
    policy_noun = "model"  # the policy is the ensemble: its weights, normaliser and optimizer
    policy_mismatch_hint = "saved with another ensemble_size, hidden or env?"

    def __init__(self, config=None, engine=None, **overrides):
        self.config = self.parse_config(config, overrides)
        self._build()
        self.env = env_creator(self.config.env, self.config.env_config)()
        self.owns_engine = engine is None
        shape = self.config.embedded_cluster()
        if engine is None and shape is not None:
            engine = Engine.local(**shape)
        self.engine = engine or SyncEngine()
        self.workers, self.plan = None, None  # no rollout workers: the driver steps the env
        self.obs, self.episode_return, self.episode_len = None, 0.0, 0

    def _build(self) -> None:
        cfg = self.config
        observation_space, action_space = self.env_spaces()
        spec = EnsembleSpec.of(observation_space, action_space, cfg.ensemble_size, cfg.hidden)
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        self.model = DynamicsEnsemble(
            observation_space, action_space, spec, cfg.lr, cfg.weight_decay
        )
        planning = CEMConfig(
            cfg.horizon,
            cfg.population,
            cfg.elites,
            cfg.cem_iterations,
            cfg.cem_alpha,
            cfg.planner_tasks,
        )
        self.planner = CEMPlanner(EnsembleRollouts(cfg.particles), action_space, planning)
        self.acting_planner = CEMPlanner(EnsembleRollouts(cfg.particles), action_space, planning)
        train_seed, acting_seed, env_seed = np.random.SeedSequence(cfg.seed).spawn(3)
        self.rng = np.random.default_rng(train_seed)
        self.acting_rng = np.random.default_rng(acting_seed)
        self.reset_seed: int | None = int(env_seed.generate_state(1)[0])
        self.data = Transitions(cfg.buffer_size, spec.obs_dim, action_space)
        self.ctx = FlowContext(history=cfg.metrics_smoothing_episodes)
        self.iteration, self.time_total_s = 0, 0.0

    def build_for_acting(self) -> None:
        self._build()

    @property
    def policy(self) -> DynamicsEnsemble:
        """The learned model (its ``observation_space`` and ``action_space`` are the env's)."""
        return self.model

    def build_plan(self, workers, ctx):  # the iteration is `train` itself
        raise NotImplementedError

    # --- one iteration ----------------------------------------------------------------

    def train(self) -> dict:
        self.check_can_train()
        start = time.perf_counter()
        cfg, counters = self.config, self.ctx.counters
        random_left = cfg.random_steps - counters["random_steps"]
        if random_left > 0:
            self.collect(random_left, planned=False)
            self.fit()
        new, plan_s = self.collect(cfg.steps_per_iteration, planned=True)
        holdout = self.model.prediction_error(new) if counters["model_updates"] else math.nan
        losses = self.fit()
        self.iteration += 1
        self.time_total_s += time.perf_counter() - start
        return self.metrics(losses, holdout, plan_s / cfg.steps_per_iteration)

    def collect(self, steps: int, planned: bool) -> tuple[dict[str, np.ndarray], float]:
        """``steps`` env steps, with the planner or random actions; returns the new
        transitions and the seconds spent planning."""
        params = as_tensors(self.model.params()) if planned else None
        split = planned and self.config.planner_tasks > 0
        params_ref = self.engine.put(self.model.params()) if split else None
        first, plan_s = self.data.added, 0.0
        for _ in range(steps):
            if self.obs is None:
                self.obs, _ = self.env.reset(seed=self.reset_seed)
                self.reset_seed = None  # seeds the first episode; the env's rng goes on
                self.planner.reset()
            if planned:
                tic = time.perf_counter()
                action = self.planner.plan(self.obs, params, self.rng, self.engine, params_ref)
                plan_s += time.perf_counter() - tic
            else:
                action = self.random_action()
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            self.data.add(self.obs, action, reward, next_obs, terminated)
            self.end_step(float(reward), terminated or truncated, next_obs)
        self.ctx.counters[STEPS] += steps
        self.ctx.counters["random_steps"] += 0 if planned else steps
        self.ctx.counters["planned_steps"] += steps if planned else 0
        return self.data.since(first), plan_s

    def random_action(self):
        space = self.model.action_space
        if isinstance(space, spaces.Discrete):
            return int(space.start + self.rng.integers(space.n))
        low, high = self.planner.low, self.planner.high
        bounded = np.isfinite(low) & np.isfinite(high)
        draw = self.rng.uniform(np.where(bounded, low, -1), np.where(bounded, high, 1))
        return draw.astype(space.dtype)

    def end_step(self, reward: float, done: bool, next_obs) -> None:
        self.episode_return += reward
        self.episode_len += 1
        self.obs = None if done else next_obs
        if done:
            self.ctx.episode_returns.append(self.episode_return)
            self.ctx.episode_lengths.append(self.episode_len)
            self.ctx.counters["episodes_total"] += 1
            self.episode_return, self.episode_len = 0.0, 0

    def fit(self) -> dict[str, float]:
        cfg = self.config
        with self.ctx.timer("fit"):
            losses = self.model.fit(
                self.data.all(), cfg.updates_per_iteration, cfg.train_batch_size, self.rng
            )
        self.ctx.counters["model_updates"] += cfg.updates_per_iteration
        return losses

    def metrics(self, losses: dict, holdout: float, plan_s: float) -> dict:
        ctx = self.ctx
        returns, lengths = list(ctx.episode_returns), list(ctx.episode_lengths)
        return {
            "iteration": self.iteration,
            "time_total_s": self.time_total_s,
            STEPS: ctx.counters[STEPS],
            "episodes_total": ctx.counters["episodes_total"],
            "episode_return_mean": float(np.mean(returns)) if returns else math.nan,
            "episode_len_mean": float(np.mean(lengths)) if lengths else math.nan,
            "dataset_size": len(self.data),
            "model_updates": ctx.counters["model_updates"],
            "plan_time_s": plan_s,
            "fit_time_total_s": ctx.timers["fit"],
            **{f"info/{k}": v for k, v in losses.items()},
            "info/holdout_mse": holdout,
            "info/planned_return": self.planner.last_info.get("planned_return", math.nan),
        }

    # --- acting -----------------------------------------------------------------------

    def compute_single_action(self, observation, explore: bool = False):
        """The planner's action from ``observation`` with the current model.

        Consecutive calls warm-start from the previous plan, as in an episode; call
        ``acting_planner.reset()`` at an episode's start. ``explore`` is ignored (the
        plan is the mean of CEM's final distribution). On an algorithm from
        `hrl_tasks.load` the candidates are evaluated in-process.
        """
        engine = None if self.acting_only else self.engine
        params = as_tensors(self.model.params())
        return self.acting_planner.plan(observation, params, self.acting_rng, engine)

    def evaluate(self, episodes: int | None = None) -> dict:
        """Episodes in the driver with a fresh planner; returns their mean return."""
        cfg = self.config
        episodes = episodes or cfg.evaluation_episodes
        seed = None if cfg.seed is None else cfg.seed + 10_000
        env = env_creator(cfg.env, cfg.env_config)()
        planner = CEMPlanner(self.planner.model, self.model.action_space, self.planner.config)
        rng, params = np.random.default_rng(seed), as_tensors(self.model.params())
        engine = None if self.acting_only else self.engine
        returns, lengths = [], []
        for k in range(episodes):
            obs, _ = env.reset(seed=None if seed is None else seed + k)
            planner.reset()
            total, length, done = 0.0, 0, False
            while not done:
                action = planner.plan(obs, params, rng, engine)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, length, done = total + float(reward), length + 1, terminated or truncated
            returns.append(total)
            lengths.append(length)
        env.close()
        return {
            "evaluation_return_mean": float(np.mean(returns)),
            "evaluation_len_mean": float(np.mean(lengths)),
            "evaluation_episodes": episodes,
        }

    # --- checkpoints ------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return {
            **self.checkpoint_header(),
            "policy": self.model.get_state(),
            "flow": self.ctx.state(),
            "data": self.data.state(),
            "rng": {"train": generator_state(self.rng), "acting": generator_state(self.acting_rng)},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_acting_state(state)
        self.ctx.restore(state["flow"])
        if "data" in state:
            self.data.restore(state["data"])
        if "rng" in state:
            self.rng = generator_from_state(state["rng"]["train"])
            self.acting_rng = generator_from_state(state["rng"]["acting"])
        self.obs, self.episode_return, self.episode_len = None, 0.0, 0  # a new episode
        self.reset_seed = int(self.rng.integers(2**31))  # not the first episode's again
        self.planner.reset()

    def stop(self) -> None:
        if self.acting_only:
            return
        self.env.close()
        if self.owns_engine:
            self.engine.close()


class Transitions:
    """The dataset: the last ``capacity`` transitions, in preallocated arrays.

    Discrete actions are kept as indices from 0 (the model's one-hot inputs).
    """

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminateds")

    def __init__(self, capacity: int, obs_dim: int, action_space: spaces.Space):
        self.capacity, self.action_space = capacity, action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        act_shape, act_dtype = ((), np.int64) if self.discrete else (action_space.shape, np.float32)
        self.arrays = {
            "obs": np.zeros((capacity, obs_dim), np.float32),
            "actions": np.zeros((capacity, *act_shape), act_dtype),
            "rewards": np.zeros(capacity, np.float32),
            "next_obs": np.zeros((capacity, obs_dim), np.float32),
            "terminateds": np.zeros(capacity, bool),
        }
        self.added = 0  # ever; the next row is added % capacity

    def __len__(self) -> int:
        return min(self.added, self.capacity)

    def add(self, obs, action, reward, next_obs, terminated) -> None:
        if self.discrete:
            action = int(action) - int(self.action_space.start)
        row = self.added % self.capacity
        for key, value in zip(
            self.FIELDS, (obs, action, reward, next_obs, terminated), strict=True
        ):
            self.arrays[key][row] = value
        self.added += 1

    def all(self) -> dict[str, np.ndarray]:
        return {k: v[: len(self)] for k, v in self.arrays.items()}

    def since(self, added: int) -> dict[str, np.ndarray]:
        """The transitions added after the first ``added`` (those still kept)."""
        rows = np.arange(max(added, self.added - self.capacity), self.added) % self.capacity
        return {k: v[rows] for k, v in self.arrays.items()}

    def state(self) -> dict:
        """The kept transitions, oldest first."""
        return self.since(0)

    def restore(self, state: dict) -> None:
        n = min(len(state["obs"]), self.capacity)  # the newest, if the capacity is smaller now
        for key in self.FIELDS:
            self.arrays[key][:n] = np.asarray(state[key])[-n:]
        self.added = n
