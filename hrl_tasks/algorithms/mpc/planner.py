"""The CEM planner of PETS: action sequences scored by rolling a model forward, the
candidate evaluations of each CEM iteration split into nested tasks.

One plan, from an observation::

    mean, std  = last plan shifted by one step (warm start), std reset
    repeat cem_iterations:
        candidates = population sequences ~ N(mean, std), clipped to the action space
        returns    = candidate_returns(model, params, observation, chunk)  # planner_tasks tasks
        mean, std  = alpha * (mean, std) + (1 - alpha) * (elites' mean, std)
    act mean[0]

Discrete action spaces get a categorical distribution per step instead, refit to the
elites' frequencies, and the most probable first action. A model is any object with
``returns(params, observation, candidates, first, population, seed)`` (see
`EnsembleRollouts`): its randomness is drawn for the whole population from ``seed``
and the chunk's rows taken, so a plan does not depend on how it is split into tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces

from hrl_tasks.algorithms.mpc.model import as_tensors, encode_actions, step


class RolloutModel(Protocol):
    def returns(
        self,
        params: Any,
        observation: np.ndarray,
        candidates: np.ndarray,
        first: int,
        population: int,
        seed: int,
    ) -> np.ndarray:
        """The return of each candidate, rows ``first`` on of a population of ``population``."""


@dataclass(frozen=True)
class EnsembleRollouts:
    """Candidates rolled through a `DynamicsEnsemble` with trajectory sampling (TS1).

    Each candidate runs ``particles`` times; at each step each particle goes through a
    member drawn at random (the population's particles are dealt to the members in equal
    shares, so one batched forward pass has no idle member) and takes a sample of that
    member's Gaussian over the next observation. A candidate's return is the mean over
    its particles of the sum of predicted (mean) rewards, up to a predicted termination.
    """

    particles: int = 1

    def returns(self, params, observation, candidates, first, population, seed) -> np.ndarray:
        params = as_tensors(params)
        n, horizon, p = len(candidates), candidates.shape[1], self.particles
        rows = slice(first * p, (first + n) * p)
        rng = np.random.default_rng(seed)
        ensemble_size, obs_dim = params["w0"].shape[0], np.shape(observation)[-1]
        deal = np.tile(np.arange(population * p) % ensemble_size, (horizon, 1))
        members = torch.from_numpy(rng.permuted(deal, axis=1)[:, rows])
        noise = rng.standard_normal((horizon, population * p, obs_dim), dtype=np.float32)
        noise = torch.from_numpy(noise[:, rows])
        actions = np.repeat(candidates, p, axis=0)  # row i * p + k: candidate i
        actions = torch.from_numpy(encode_actions(params, actions.reshape(n * p * horizon, -1)))
        actions = actions.reshape(n * p, horizon, -1)
        obs = torch.from_numpy(np.asarray(observation, np.float32)).expand(n * p, obs_dim)
        total, alive = torch.zeros(n * p, dtype=torch.float64), torch.ones(n * p, dtype=torch.bool)
        for t in range(horizon):
            obs, reward, terminated = step(params, obs, actions[:, t], members[t], noise[t])
            total += torch.where(alive, reward, 0.0)
            alive &= ~terminated
        return total.numpy().reshape(n, p).mean(axis=1)


def candidate_returns(
    model: RolloutModel, params, observation, candidates, first, population, seed
):
    """A task: the returns of one chunk of candidates (see `RolloutModel.returns`)."""
    return model.returns(params, observation, candidates, first, population, seed)


@dataclass(frozen=True)
class CEMConfig:
    """The planner's keys (see `MPCConfig`)."""

    horizon: int = 25
    population: int = 400
    elites: int = 40
    iterations: int = 5
    alpha: float = 0.1
    tasks: int = 0


class CEMPlanner:
    """Model-predictive control by the cross-entropy method, warm-started from its last plan.

    Example::

        planner = CEMPlanner(EnsembleRollouts(), env.action_space, CEMConfig(horizon=25))
        obs, _ = env.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(planner.plan(obs, params, rng))
            if terminated or truncated:
                planner.reset()
                ...

    Args:
        model: Scores candidates (a `RolloutModel`).
        action_space: A flat Box (sequences sampled from Gaussians and clipped to it) or a
            Discrete space (from categorical distributions).
        config: Horizon, population, elites, iterations, smoothing and tasks.
    """

    def __init__(self, model: RolloutModel, action_space: spaces.Space, config: CEMConfig):
        self.model, self.space, self.config = model, action_space, config
        self.discrete = isinstance(action_space, spaces.Discrete)
        if not self.discrete:
            low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
            bounded = np.isfinite(low) & np.isfinite(high)
            self.low, self.high = np.where(bounded, low, -np.inf), np.where(bounded, high, np.inf)
            self.center = np.where(bounded, (low + high) / 2, 0.0)
            self.spread = np.where(bounded, (high - low) / 4, 1.0)  # PETS: variance (range/4)^2
        self.previous: tuple | None = None  # the last plan's distribution
        self.last_info: dict[str, float] = {}

    def reset(self) -> None:
        """Forget the last plan (at the start of an episode)."""
        self.previous = None

    def plan(self, observation, params, rng: np.random.Generator, engine=None, params_ref=None):
        """The first action of the best action sequence found from ``observation``.

        Args:
            observation: The env's observation.
            params: The model's parameters (for in-process evaluation).
            rng: Draws the candidates and the model's seeds.
            engine: Split each CEM iteration's evaluations into ``config.tasks`` tasks on
                it; None (or ``tasks == 0``) evaluates them here.
            params_ref: ``engine.put(params)``, to share one copy between plans;
                by default ``params`` is put once for this plan.

        Returns:
            An action of the action space: a float32 array, or an int.
        """
        cfg = self.config
        observation = np.asarray(observation, np.float32)
        dist = self._initial()
        split = engine is not None and cfg.tasks > 0
        if split and params_ref is None:
            params_ref = engine.put(params)
        for _ in range(cfg.iterations):
            candidates = self._sample(dist, rng)
            seed = int(rng.integers(2**62))
            if split:
                returns = self._in_tasks(engine, params_ref, observation, candidates, seed)
            else:
                returns = self.model.returns(
                    params, observation, candidates, 0, len(candidates), seed
                )
            elite = candidates[np.argsort(-returns, kind="stable")[: cfg.elites]]
            dist = self._refit(dist, elite)
        self.previous = dist
        self.last_info = {"planned_return": float(np.sort(returns)[-cfg.elites :].mean())}
        if self.discrete:
            return int(self.space.start + np.argmax(dist[0][0]))
        return np.clip(dist[0][0], self.low, self.high).astype(self.space.dtype)

    def _in_tasks(self, engine, params_ref, observation, candidates, seed) -> np.ndarray:
        n, tasks = len(candidates), self.config.tasks
        bounds = np.linspace(0, n, tasks + 1).astype(int)
        chunks = [candidates[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        refs = engine.map(
            candidate_returns,
            [self.model] * tasks,
            [params_ref] * tasks,
            [observation] * tasks,
            chunks,
            bounds[:-1].tolist(),
            [n] * tasks,
            [seed] * tasks,
            name="mpc-candidates",
            retries=2,
        )
        return np.concatenate(engine.gather(refs))

    # --- the sampling distribution: (mean, std) or (probs,) per step --------------------

    def _initial(self) -> tuple:
        h = self.config.horizon
        if self.discrete:
            uniform = np.full((1, self.space.n), 1.0 / self.space.n)
            if self.previous is None:
                return (np.repeat(uniform, h, axis=0),)
            return (np.concatenate([self.previous[0][1:], uniform]),)
        std = np.repeat(self.spread[None], h, axis=0)
        if self.previous is None:
            return np.repeat(self.center[None], h, axis=0), std
        return np.concatenate([self.previous[0][1:], self.center[None]]), std

    def _sample(self, dist: tuple, rng: np.random.Generator) -> np.ndarray:
        n = self.config.population
        if self.discrete:
            (probs,) = dist
            cumulative = np.cumsum(probs, axis=-1)
            draws = rng.random((n, len(probs), 1)) * cumulative[:, -1:]
            index = (draws >= cumulative).sum(-1)  # rounding may push a draw past the end
            return np.minimum(index, self.space.n - 1).astype(np.int64)
        mean, std = dist
        candidates = mean + std * rng.standard_normal((n, *mean.shape))
        return np.clip(candidates, self.low, self.high).astype(np.float32)

    def _refit(self, dist: tuple, elite: np.ndarray) -> tuple:
        a = self.config.alpha
        if self.discrete:
            (probs,) = dist
            counts = np.eye(self.space.n)[elite].mean(axis=0)  # (horizon, n)
            return (a * probs + (1 - a) * counts,)
        mean, std = dist
        return a * mean + (1 - a) * elite.mean(0), a * std + (1 - a) * elite.std(0)
