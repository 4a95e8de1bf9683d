"""TD3: twin delayed deep deterministic policy gradient.

Fujimoto et al. 2018 (https://arxiv.org/abs/1802.09477): clipped double Q,
target policy smoothing, and actor and target updates every ``policy_delay``
critic updates. Defaults are Stable-Baselines3's: ReLU MLPs of (400, 300), lr
1e-3, tau 0.005, exploration noise N(0, 0.1), target noise 0.2 clipped at 0.5,
in units of the [-1, 1]-scaled action.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import TD3PolicyConfig, renamed
from hrl_tasks.policies.losses import soft_q_targets, twin_q_loss
from hrl_tasks.policies.models import MLP
from hrl_tasks.policies.twin_q import TwinQ, TwinQPolicy, frozen


class TD3Model(nn.Module):
    """A deterministic tanh actor and twin critics."""

    def __init__(self, obs_dim: int, action_dim: int, hidden, normalizer):
        super().__init__()
        self.obs_normalizer = normalizer
        self.actor = nn.Sequential(MLP(obs_dim, action_dim, hidden, nn.ReLU), nn.Tanh())
        self.critic = TwinQ(obs_dim, action_dim, False, hidden)


class TD3Policy(TwinQPolicy):
    """TD3 (see the module doc); Box actions only.

    `loss` reads the columns of `SACPolicy.loss`. Terms: ``loss_critic`` =
    ``sum_i mean(w * (Q_i(s, a) - y)^2)`` with ``y = r + D * min_i Q'_i(s', clip(mu'(s')
    + clip(eps, -c, c), -1, 1))``; every ``policy_delay``-th update also
    ``loss_actor`` = ``-mean(Q_1(s, mu(s)))`` through frozen critics (``0``
    otherwise). Call `update_target` after the updates where `actor_updates_now`
    was True.
    """

    config_class = TD3PolicyConfig
    target_parts = ("actor", "critic")

    def make_model(self) -> nn.Module:
        return TD3Model(self.obs_dim, self.action_dim, self.config.hidden, self.make_normalizer())

    def actor_updates_now(self) -> bool:
        """Whether the next update trains the actor (every ``policy_delay``-th, the first
        being ``policy_delay - 1`` updates in, as Stable-Baselines3's)."""
        return (self.num_grad_updates + 1) % self.config.policy_delay == 0

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """As `TorchPolicy.apply_gradients`; between actor updates the actor's entries
        are left out (its optimizer does not step), as in `learn_on_batch`."""
        if not self.actor_updates_now():
            actor = {id(p) for p in self.model.actor.parameters()}
            grads = [None if id(p) in actor else g for p, g in zip(self.params, grads, strict=True)]
        super().apply_gradients(grads)

    def target_due(self) -> bool:
        """After each update that trained the actor."""
        return self.num_grad_updates % self.config.policy_delay == 0

    @torch.no_grad()
    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        """The actor's action, plus Gaussian noise when exploring (uniform actions before
        learning starts, see `set_uniform_actions`).

        Returns:
            ``(actions, {})``: actions in the env's units and dtype.
        """
        if explore and self.uniform_actions:
            return self.uniform(len(obs)), {}
        unit = self.model.actor(self.obs_features(obs))
        if explore and self.config.exploration_noise > 0:
            noise = torch.randn(unit.shape, generator=self.generator)
            unit = (unit + self.config.exploration_noise * noise).clamp(-1.0, 1.0)
        return self.from_unit(unit.numpy()), {}

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        cfg = self.config
        cols = self.replay_columns(batch)
        with torch.no_grad():
            next_actions = self.target_model.actor(cols["next_obs"])
            noise = self.randn(next_actions.shape) * cfg.target_noise
            noise = noise.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
            next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            next_q1, next_q2 = self.target_model.critic(cols["next_obs"], next_actions)
            targets = soft_q_targets(
                cols["rewards"], cols["discounts"], next_q1, next_q2, torch.zeros_like(next_q1), 0.0
            )
        q1, q2 = self.model.critic(cols["obs"], cols["actions"])
        loss_critic = 2.0 * twin_q_loss(q1, q2, targets, cols["weights"])  # SB3's: the full sum
        if self.actor_updates_now():
            with frozen(self.model.critic):
                q_pi, _ = self.model.critic(cols["obs"], self.model.actor(cols["obs"]))
            loss_actor = -q_pi.mean()
        else:
            loss_actor = torch.zeros(())
        return {
            "loss_critic": loss_critic,
            "loss_actor": loss_actor,
            "total": loss_critic + loss_actor,
            "td_error": (q1 - targets).detach(),
            "q_mean": q1.mean().detach(),
        }


def __getattr__(name: str):  # the config's old name, TD3Config
    return renamed(__name__, name, ("TD3Config",))
