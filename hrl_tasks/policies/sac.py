"""Soft actor-critic with twin Q and an automatically tuned entropy temperature,
for Box and Discrete actions.

Haarnoja et al. 2018 (https://arxiv.org/abs/1812.05905, "Soft Actor-Critic
Algorithms and Applications"); the discrete form after Christodoulou 2019
(https://arxiv.org/abs/1910.07207). The losses and defaults are those of
Stable-Baselines3's SAC: ReLU MLPs of (256, 256), lr 3e-4 for the actor, the
critics and the temperature alike, tau 0.005, temperature starting at 1 and tuned
toward an entropy of ``-dim(A)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import SACPolicyConfig, renamed
from hrl_tasks.policies.losses import (
    sac_actor_loss,
    soft_q_targets,
    soft_values,
    temperature_loss,
    twin_q_loss,
)
from hrl_tasks.policies.models import MLP
from hrl_tasks.policies.twin_q import TwinQ, TwinQPolicy, frozen

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # as Stable-Baselines3's SAC


class SACModel(nn.Module):
    """The actor (mean and log-std of a tanh-squashed Gaussian, or logits), the twin
    critics and the log-temperature."""

    def __init__(
        self, obs_dim: int, action_dim: int, discrete: bool, hidden, alpha: float, normalizer
    ):
        super().__init__()
        self.obs_normalizer = normalizer
        out = action_dim if discrete else 2 * action_dim
        self.actor = MLP(obs_dim, out, hidden, nn.ReLU, output_gain=0.01)
        self.critic = TwinQ(obs_dim, action_dim, discrete, hidden)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha), dtype=torch.float32))


def squashed_sample(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tanh(mean + std * noise), log-probability)`` of a tanh-squashed diagonal
    Gaussian, with the change of variables ``log(1 - tanh(u)^2) = 2 (log 2 - u -
    softplus(-2u))`` (stable for large ``|u|``). Pure."""
    std = log_std.exp()
    u = mean + std * noise
    gaussian = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    correction = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), gaussian - correction


class SACPolicy(TwinQPolicy):
    """Soft actor-critic (see the module doc).

    `loss` reads ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds``,
    and when present ``discounts`` (n-step) and ``weights`` (prioritized replay).
    Its terms, summed into ``total`` and minimized in one step (each touches only
    its own parameters: the actor's loss goes through frozen critics):

    - ``loss_critic``: ``0.5 * sum_i mean(w * (Q_i(s, a) - y)^2)`` with ``y = r + D *
      (min_i Q'_i(s', a') - alpha * log pi(a' | s'))``, ``a' ~ pi(s')``;
    - ``loss_actor``: ``mean(alpha * log pi(a | s) - min_i Q_i(s, a))``, ``a ~ pi(s)``
      reparameterized (for Discrete actions, the expectation over pi instead);
    - ``loss_alpha``: ``-mean(log alpha * (log pi(a | s) + target_entropy))``.

    ``td_error`` (per row) is the first critic's error, for prioritized replay.
    Call `update_target` after each step (Polyak with ``tau``).
    """

    config_class = SACPolicyConfig
    supports_discrete = True
    target_parts = ("critic",)

    def setup(self) -> None:
        super().setup()
        if self.config.target_entropy is not None:
            self.target_entropy = float(self.config.target_entropy)
        elif self.discrete:
            self.target_entropy = 0.89 * math.log(self.action_dim)
        else:
            self.target_entropy = -float(self.action_dim)

    def make_model(self) -> nn.Module:
        cfg = self.config
        return SACModel(
            self.obs_dim,
            self.action_dim,
            self.discrete,
            cfg.hidden,
            cfg.initial_alpha,
            self.make_normalizer(),
        )

    @property
    def alpha(self) -> torch.Tensor:
        return self.model.log_alpha.detach().exp()

    def _actor_out(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.model.actor(obs)
        if self.discrete:
            return out, None
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def _sample(self, obs: torch.Tensor):
        """``(unit actions, log-probabilities)`` drawn from the actor, reparameterized."""
        mean, log_std = self._actor_out(obs)
        return squashed_sample(mean, log_std, self.randn(mean.shape))

    @torch.no_grad()
    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        """Sampled actions when exploring (uniform ones before learning starts, see
        `set_uniform_actions`), else the mean's (Box) or the most likely (Discrete).

        Returns:
            ``(actions, {})``: actions in the env's units and dtype.
        """
        n = len(obs)
        if explore and self.uniform_actions:
            return self.uniform(n), {}
        features = self.obs_features(obs)
        if self.discrete:
            logits, _ = self._actor_out(features)
            if explore:
                actions = torch.multinomial(logits.softmax(-1), 1, generator=self.generator)
                return self.to_actions(actions.squeeze(-1)), {}
            return self.to_actions(logits.argmax(-1)), {}
        if explore:
            unit, _ = self._sample(features)
        else:
            unit = torch.tanh(self._actor_out(features)[0])
        return self.from_unit(unit.numpy()), {}

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        cols = self.replay_columns(batch)
        return self._discrete_loss(cols) if self.discrete else self._box_loss(cols)

    def _box_loss(self, cols: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        alpha = self.alpha
        with torch.no_grad():
            next_actions, next_logp = self._sample(cols["next_obs"])
            next_q1, next_q2 = self.target_model.critic(cols["next_obs"], next_actions)
            targets = soft_q_targets(
                cols["rewards"], cols["discounts"], next_q1, next_q2, next_logp, alpha
            )
        q1, q2 = self.model.critic(cols["obs"], cols["actions"])
        loss_critic = twin_q_loss(q1, q2, targets, cols["weights"])
        actions, logp = self._sample(cols["obs"])
        with frozen(self.model.critic):
            q1_pi, q2_pi = self.model.critic(cols["obs"], actions)
        loss_actor = sac_actor_loss(logp, q1_pi, q2_pi, alpha)
        return self._terms(loss_critic, loss_actor, logp.detach(), q1, targets)

    def _discrete_loss(self, cols: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        alpha = self.alpha
        with torch.no_grad():
            next_logp = self._actor_out(cols["next_obs"])[0].log_softmax(-1)
            next_v = soft_values(*self.target_model.critic(cols["next_obs"]), next_logp, alpha)
            targets = cols["rewards"] + cols["discounts"] * next_v
        q1_all, q2_all = self.model.critic(cols["obs"])
        taken = cols["actions"].unsqueeze(-1)
        q1, q2 = q1_all.gather(-1, taken).squeeze(-1), q2_all.gather(-1, taken).squeeze(-1)
        loss_critic = twin_q_loss(q1, q2, targets, cols["weights"])
        logp_all = self._actor_out(cols["obs"])[0].log_softmax(-1)
        loss_actor = sac_actor_loss(logp_all, q1_all.detach(), q2_all.detach(), alpha)
        expected_logp = (logp_all.exp() * logp_all).sum(-1).detach()  # -entropy
        return self._terms(loss_critic, loss_actor, expected_logp, q1, targets)

    def _terms(self, loss_critic, loss_actor, logp, q1, targets) -> dict[str, torch.Tensor]:
        """The temperature's term, and every term and diagnostic in one dict."""
        if self.config.tune_alpha:
            loss_alpha = temperature_loss(self.model.log_alpha, logp, self.target_entropy)
        else:
            loss_alpha = self.model.log_alpha * 0.0
        return {
            "loss_critic": loss_critic,
            "loss_actor": loss_actor,
            "loss_alpha": loss_alpha,
            "total": loss_critic + loss_actor + loss_alpha,
            "td_error": (q1 - targets).detach(),
            "q_mean": q1.mean().detach(),
            "alpha": self.alpha,
            "entropy": -logp.mean(),
        }


def __getattr__(name: str):  # the config's old name, SACConfig
    return renamed(__name__, name, ("SACConfig",))
