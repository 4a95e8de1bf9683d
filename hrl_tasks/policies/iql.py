"""Implicit Q-learning: values of the recorded actions only, a policy extracted by
advantage-weighted regression; for Box and Discrete actions, learned offline.

Kostrikov, Nair and Levine 2021 (https://arxiv.org/abs/2110.06169). No action outside
the data is ever evaluated: ``V(s)`` learns an upper expectile of the target critics'
``Q(s, a)`` over the recorded actions (`losses.expectile_loss`), the twin critics learn
``r + gamma * V(s')``, and the actor imitates each recorded action with the weight
``exp(beta * (Q - V))`` (`losses.advantage_weights`). The actor is the paper's and
d3rlpy's: a Gaussian whose mean is a tanh and whose log-std is a learned parameter per
action dimension (Box), or a softmax over the actions (Discrete). The paper's cosine
schedule of the actor's learning rate and its dropout are left out (d3rlpy's defaults
leave them out too).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import IQLPolicyConfig
from hrl_tasks.policies.losses import advantage_weights, expectile_loss, twin_q_loss
from hrl_tasks.policies.models import MLP
from hrl_tasks.policies.twin_q import TwinQ, TwinQPolicy

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the paper's and d3rlpy's


class IQLModel(nn.Module):
    """The actor (logits, or the Gaussian's mean before its tanh, with ``log_std``), the
    twin critics and the state value."""

    def __init__(self, obs_dim: int, action_dim: int, discrete: bool, hidden, normalizer):
        super().__init__()
        self.obs_normalizer = normalizer
        self.actor = MLP(obs_dim, action_dim, hidden, nn.ReLU, output_gain=0.01)
        self.log_std = nn.Parameter(torch.zeros(0 if discrete else action_dim))
        self.critic = TwinQ(obs_dim, action_dim, discrete, hidden)
        self.value = MLP(obs_dim, 1, hidden, nn.ReLU)


class IQLPolicy(TwinQPolicy):
    """Implicit Q-learning (see the module doc).

    `loss` reads ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds`` (and
    ``discounts`` and ``weights`` when present). Its terms, summed into ``total`` and
    minimized in one step (each moves only its own network):

    - ``loss_value``: ``expectile_loss(min_i Q'_i(s, a) - V(s))``, the target critics';
    - ``loss_critic``: ``0.5 * sum_i mean(w * (Q_i(s, a) - (r + D * V(s')))^2)``;
    - ``loss_actor``: ``-mean(min(exp(beta * (min_i Q'_i(s, a) - V(s))), max_weight) *
      log pi(a | s))``.

    Call `update_target` after each step (Polyak with ``tau``).
    """

    config_class = IQLPolicyConfig
    supports_discrete = True
    target_parts = ("critic",)

    def make_model(self) -> nn.Module:
        cfg = self.config
        return IQLModel(
            self.obs_dim, self.action_dim, self.discrete, cfg.hidden, self.make_normalizer()
        )

    def _gaussian(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)`` of the Box actor at each state, in unit actions."""
        mean = torch.tanh(self.model.actor(features))
        std = self.model.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp().expand_as(mean)
        return mean, std

    def _logp(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a | s)``: of action indices (Discrete) or unit actions (Box)."""
        if self.discrete:
            logp_all = self.model.actor(features).log_softmax(-1)
            return logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        mean, std = self._gaussian(features)
        return torch.distributions.Normal(mean, std).log_prob(actions).sum(-1)

    def _draw(self, features: torch.Tensor, explore: bool) -> torch.Tensor:
        """Actions at each state: sampled (``explore``) or the most likely; unit actions
        clipped to [-1, 1] for Box."""
        if self.discrete:
            logits = self.model.actor(features)
            if not explore:
                return logits.argmax(-1)
            return torch.multinomial(logits.softmax(-1), 1, generator=self.generator).squeeze(-1)
        mean, std = self._gaussian(features)
        unit = mean + std * self.randn(mean.shape) if explore else mean
        return unit.clamp(-1.0, 1.0)

    def _env_actions(self, drawn: torch.Tensor) -> np.ndarray:
        return self.to_actions(drawn) if self.discrete else self.from_unit(drawn.numpy())

    @torch.no_grad()
    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        """Sampled actions when exploring, else the Gaussian's mean (Box) or the most
        likely action (Discrete).

        Returns:
            ``(actions, {})``: actions in the env's units and dtype.
        """
        return self._env_actions(self._draw(self.obs_features(obs), explore)), {}

    # Off-policy estimates (`hrl_tasks.algorithms.offline`) ---------------------------

    @torch.no_grad()
    def action_logp(self, batch: SampleBatch) -> np.ndarray:
        """``log pi(a|s)`` of ``batch``'s ``actions`` (in the env's units: a density over
        them for Box actions) at its ``obs`` (float64)."""
        features = self.obs_features(batch[SampleBatch.OBS])
        if self.discrete:
            actions = self.column(batch, SampleBatch.ACTIONS, np.int64)
            return self._logp(features, actions).numpy().astype(np.float64)
        unit = self.to_unit(self.column(batch, SampleBatch.ACTIONS))
        to_env = float(np.sum(np.log(self._span / 2.0)))  # d(env action) / d(unit action)
        return self._logp(features, unit).numpy().astype(np.float64) - to_env

    @torch.no_grad()
    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        """Discrete actions: ``pi(.|s)`` at each of ``obs``, ``[N, n]`` (float64).

        Raises:
            TypeError: for a Box action space (it has densities, not probabilities).
        """
        if not self.discrete:
            raise TypeError("action_probs needs Discrete actions")
        logits = self.model.actor(self.obs_features(obs))
        return logits.softmax(-1).numpy().astype(np.float64)

    @torch.no_grad()
    def sample_actions(self, obs: np.ndarray, k: int) -> np.ndarray:
        """``k`` actions drawn from ``pi(.|s)`` at each of ``obs``, in the env's units:
        ``[N, k, ...]``."""
        features = self.obs_features(np.repeat(np.asarray(obs), k, axis=0))
        actions = self._env_actions(self._draw(features, explore=True))
        return actions.reshape(len(obs), k, *actions.shape[1:])

    # Learning -----------------------------------------------------------------------

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        """The recorded one-step transitions, as they are (IQL has no ``n_step``)."""
        return batch

    def _taken(self, critic, obs: torch.Tensor, actions: torch.Tensor):
        """``(Q1, Q2)`` of the taken actions, ``[B]`` each."""
        if not self.discrete:
            return critic(obs, actions)
        taken = actions.unsqueeze(-1)
        return tuple(q.gather(-1, taken).squeeze(-1) for q in critic(obs))

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        cfg, cols = self.config, self.replay_columns(batch)
        obs, actions = cols["obs"], cols["actions"]
        with torch.no_grad():
            q_target = torch.min(*self._taken(self.target_model.critic, obs, actions))
            next_v = self.model.value(cols["next_obs"]).squeeze(-1)
            targets = cols["rewards"] + cols["discounts"] * next_v
        v = self.model.value(obs).squeeze(-1)
        loss_value = expectile_loss(q_target - v, cfg.expectile)
        q1, q2 = self._taken(self.model.critic, obs, actions)
        loss_critic = twin_q_loss(q1, q2, targets, cols["weights"])
        advantages = (q_target - v).detach()
        weights = advantage_weights(advantages, cfg.beta, cfg.max_weight)
        loss_actor = -(weights * self._logp(obs, actions)).mean()
        return {
            "loss_value": loss_value,
            "loss_critic": loss_critic,
            "loss_actor": loss_actor,
            "total": loss_value + loss_critic + loss_actor,
            "td_error": (q1 - targets).detach(),
            "q_mean": q1.mean().detach(),
            "v_mean": v.mean().detach(),
            "advantage_mean": advantages.mean(),
            "weight_mean": weights.mean(),
        }
