"""Policy gradient with a learned baseline (A2C) or without one (REINFORCE).

Loss on rows ``(s, a, A, G)``: ``-mean(log pi(a|s) A) + vf_coef * 0.5 mean((V(s) - G)^2)
- ent_coef * mean(H(pi(.|s)))`` with GAE advantages ``A`` and value targets
``G`` (Mnih et al. 2016, A3C, https://arxiv.org/abs/1602.01783; Schulman et al.
2016, GAE, https://arxiv.org/abs/1506.02438).
"""

from __future__ import annotations

from functools import partial

import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.actor_critic import ActorCriticPolicy
from hrl_tasks.policies.configs import PGPolicyConfig, renamed
from hrl_tasks.policies.losses import entropy_loss, value_loss
from hrl_tasks.policies.postprocessing import add_discounted_returns, add_gae


class PGPolicy(ActorCriticPolicy):
    """A2C / REINFORCE policy.

    `postprocess_trajectory` reads ``rewards``, ``values``, ``next_values``,
    ``terminateds``, ``truncateds`` of one env's fragment (see
    `hrl_tasks.policies.actor_critic`) and adds ``advantages`` and
    ``value_targets`` with GAE. `loss` reads ``obs``, ``actions``,
    ``advantages`` and, with a critic, ``value_targets``.

    Usage::

        policy = PGPolicy(obs_space, act_space, PGPolicyConfig(lr=1e-3))
        batch = policy.postprocess_trajectory(fragment)
        info = policy.learn_on_batch(batch)   # one gradient step

    Args:
        observation_space: A Box space.
        action_space: Discrete or 1-D Box.
        config: A `PGPolicyConfig`; None uses the defaults.
    """

    config_class = PGPolicyConfig

    def postprocessor(self):
        """Adds GAE ``advantages`` and ``value_targets`` (without a critic: discounted returns)."""
        if self.config.use_critic:
            return partial(add_gae, gamma=self.config.gamma, lam=self.config.lam)
        return partial(add_discounted_returns, gamma=self.config.gamma)

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_policy``, ``loss_value`` (with a critic), ``loss_entropy``; ``entropy``."""
        cfg = self.config
        dist, values, logp = self.forward_batch(batch)
        advantages = self.column(batch, SampleBatch.ADVANTAGES)
        if cfg.normalize_advantages:
            advantages = self.standardize(advantages)
        entropy = dist.entropy()
        terms = {"loss_policy": -(logp * advantages).mean()}
        if cfg.use_critic:
            targets = self.column(batch, SampleBatch.VALUE_TARGETS)
            terms["loss_value"] = cfg.vf_coef * value_loss(values, targets)
        terms["loss_entropy"] = cfg.ent_coef * entropy_loss(entropy)
        return {**terms, "total": sum(terms.values()), "entropy": entropy.mean().detach()}


def __getattr__(name: str):  # the config's old name, PGConfig
    return renamed(__name__, name, ("PGConfig",))
