"""Fitted Q evaluation: the Q-values of a target policy, learned from recorded transitions.

Le, Voloshin and Yue 2019 ("Batch Policy Learning under Constraints"): regress
``Q(s, a)`` on ``r + gamma * (1 - terminated) * sum_a' pi(a'|s') Q_target(s', a')``
over the recorded transitions, the target network copied every ``target_every``
steps. The doubly robust estimate
(`hrl_tasks.policies.off_policy_estimation.doubly_robust`) takes its ``Q(s_t, a_t)``
and ``V(s_t) = sum_a pi(a|s_t) Q(s_t, a)``.

`FittedQEvaluation` is for Discrete actions (one output per action);
`ContinuousFittedQEvaluation` for Box actions takes the action as an input and
replaces the sum over actions by the mean over actions drawn from the policy
(``E_{a' ~ pi(s')} Q(s', a')``, as d3rlpy's FQE and RLlib's continuous FQE do).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from hrl_tasks.policies.models import MLP


def regress(fqe, rows: int, loss, steps: int, batch_size: int, target_every: int) -> float:
    """``steps`` Adam steps of ``fqe.q`` on ``loss(indices)`` over minibatches of the
    ``rows`` drawn with ``fqe.rng``, ``fqe.target`` copied from it every
    ``target_every`` steps; returns the last loss."""
    last = torch.zeros(())
    for step in range(steps):
        if step % target_every == 0:
            fqe.target.load_state_dict(fqe.q.state_dict())
        last = loss(torch.as_tensor(fqe.rng.integers(rows, size=min(batch_size, rows))))
        fqe.optimizer.zero_grad()
        last.backward()
        fqe.optimizer.step()
    return float(last)


class FittedQEvaluation:
    """A Q network of one target policy, fitted to recorded transitions.

    Args:
        obs_dim: Size of a (flattened) observation.
        num_actions: Number of discrete actions.
        gamma: Discount.
        hidden: Hidden widths of the Q network.
        lr: Adam learning rate.
        seed: Seed of the weights and of the minibatches.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        gamma: float,
        hidden=(64, 64),
        lr: float = 1e-3,
        seed: int | None = None,
    ):
        if seed is not None:
            torch.manual_seed(seed)
        self.q = MLP(obs_dim, num_actions, tuple(hidden), nn.ReLU)
        self.target = copy.deepcopy(self.q)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma = gamma
        self.rng = np.random.default_rng(seed)

    def fit(
        self,
        rows: dict[str, np.ndarray],
        next_probs: np.ndarray,
        steps: int = 500,
        batch_size: int = 256,
        target_every: int = 100,
    ) -> float:
        """``steps`` regression steps on ``rows`` (``obs``, ``actions``, ``rewards``,
        ``next_obs``, ``terminateds``), ``next_probs[i]`` being the target policy's
        action probabilities at row ``i``'s ``next_obs``; returns the last loss."""
        obs = torch.as_tensor(rows["obs"], dtype=torch.float32).flatten(1)
        next_obs = torch.as_tensor(rows["next_obs"], dtype=torch.float32).flatten(1)
        actions = torch.as_tensor(rows["actions"], dtype=torch.int64)
        rewards = torch.as_tensor(rows["rewards"], dtype=torch.float32)
        alive = 1.0 - torch.as_tensor(rows["terminateds"], dtype=torch.float32)
        probs = torch.as_tensor(next_probs, dtype=torch.float32)

        def loss(i: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                next_v = (probs[i] * self.target(next_obs[i])).sum(-1)
                target = rewards[i] + self.gamma * alive[i] * next_v
            q = self.q(obs[i]).gather(-1, actions[i].unsqueeze(-1)).squeeze(-1)
            return nn.functional.mse_loss(q, target)

        return regress(self, len(obs), loss, steps, batch_size, target_every)

    @torch.no_grad()
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q(s, .)`` of every action at each of ``obs``: ``[N, num_actions]``, float64."""
        x = torch.as_tensor(obs, dtype=torch.float32).flatten(1)
        return self.q(x).numpy().astype(np.float64)


class ContinuousFittedQEvaluation:
    """A ``Q(s, a)`` network of one target policy with Box actions, fitted to recorded
    transitions; the next state's value is the mean of ``Q`` over actions drawn from the
    policy there (drawn once, before fitting).

    Args:
        obs_dim: Size of a (flattened) observation.
        action_dim: Size of a (flattened) action.
        gamma, hidden, lr, seed: As for `FittedQEvaluation`.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        gamma: float,
        hidden=(64, 64),
        lr: float = 1e-3,
        seed: int | None = None,
    ):
        if seed is not None:
            torch.manual_seed(seed)
        self.q = MLP(obs_dim + action_dim, 1, tuple(hidden), nn.ReLU)
        self.target = copy.deepcopy(self.q)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma = gamma
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _pairs(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``[N, K, obs + action]`` inputs of ``obs`` ``[N, O]`` with ``actions`` ``[N, K, A]``."""
        return torch.cat([obs.unsqueeze(1).expand(-1, actions.shape[1], -1), actions], -1)

    def fit(
        self,
        rows: dict[str, np.ndarray],
        next_actions: np.ndarray,
        steps: int = 500,
        batch_size: int = 256,
        target_every: int = 100,
    ) -> float:
        """``steps`` regression steps on ``rows`` (``obs``, ``actions``, ``rewards``,
        ``next_obs``, ``terminateds``), ``next_actions[i]`` (``[K, A]``) being actions
        the target policy draws at row ``i``'s ``next_obs``; returns the last loss."""
        obs = torch.as_tensor(rows["obs"], dtype=torch.float32).flatten(1)
        next_obs = torch.as_tensor(rows["next_obs"], dtype=torch.float32).flatten(1)
        actions = torch.as_tensor(rows["actions"], dtype=torch.float32).reshape(len(obs), -1)
        drawn = torch.as_tensor(next_actions, dtype=torch.float32).reshape(
            len(obs), -1, actions.shape[1]
        )
        rewards = torch.as_tensor(rows["rewards"], dtype=torch.float32)
        alive = 1.0 - torch.as_tensor(rows["terminateds"], dtype=torch.float32)

        def loss(i: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                next_v = self.target(self._pairs(next_obs[i], drawn[i])).squeeze(-1).mean(-1)
                target = rewards[i] + self.gamma * alive[i] * next_v
            q = self.q(torch.cat([obs[i], actions[i]], -1)).squeeze(-1)
            return nn.functional.mse_loss(q, target)

        return regress(self, len(obs), loss, steps, batch_size, target_every)

    @torch.no_grad()
    def q_values(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``Q(s, a)`` at each of ``obs`` for actions ``[N, K, A]``: ``[N, K]``, float64."""
        x = torch.as_tensor(obs, dtype=torch.float32).flatten(1)
        a = torch.as_tensor(actions, dtype=torch.float32).reshape(len(x), -1, actions.shape[-1])
        return self.q(self._pairs(x, a)).squeeze(-1).numpy().astype(np.float64)
