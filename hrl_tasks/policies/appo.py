"""APPO: PPO's clipped surrogate on IMPALA's V-trace advantages.

Asynchronous PPO as in RLlib's APPO and Sample Factory (Petrenko et al. 2020,
https://arxiv.org/abs/2006.11751): the actors' data is a few updates old, so
the advantages come from V-trace (`IMPALAPolicy.vtrace_targets`) and the
ratio ``pi(a|x) / mu(a|x)`` is taken against the behaviour ``logp`` stored in
the batch, then clipped as in PPO (`losses.clipped_surrogate_loss`).
"""

from __future__ import annotations

import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import APPOPolicyConfig, renamed
from hrl_tasks.policies.impala import IMPALAPolicy
from hrl_tasks.policies.losses import clipped_surrogate_loss, entropy_loss, value_loss
from hrl_tasks.policies.torch_utils import Info


class APPOPolicy(IMPALAPolicy):
    """V-trace actor-critic with PPO's clipped surrogate as the policy loss.

    Reads the batch as `IMPALAPolicy` does (time-ordered fragments, behaviour
    ``logp``, ``next_values``). With ``(vs, A)`` from V-trace, where
    ``A_t = rho_pg_t * (r_t + gamma * vs_{t+1} - V(x_t))`` with ``rho_pg`` clipped
    at ``clip_pg_rho_threshold`` (as in RLlib's APPO), the loss is
    ``-mean(min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A))
    + vf_coef * 0.5 mean((V(x) - vs)^2) - ent_coef * mean(H)`` with
    ``ratio = pi(a|x) / mu(a|x)``. On-policy and unclipped, its gradient is IMPALA's.

    Usage::

        policy = APPOPolicy(obs_space, act_space, APPOPolicyConfig(rollout_fragment_length=32))
        info = policy.learn_on_batch(batch)  # num_sgd_iter steps on whole fragments

    Args:
        observation_space: A Box space.
        action_space: Discrete or 1-D Box.
        config: An `APPOPolicyConfig`; None uses the defaults.
    """

    config_class = APPOPolicyConfig

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_policy``, ``loss_value``, ``loss_entropy``; diagnostics ``entropy``,
        ``mean_rho`` (the mean unclipped ``pi / mu``) and ``clip_fraction``."""
        cfg = self.config
        tm = self.time_major(batch)
        dist, values, logp = self.forward_batch(tm)
        vs, advantages = self.vtrace_targets(tm, values, logp)
        behaviour_logp = self.column(tm, SampleBatch.LOGP)
        entropy = dist.entropy()
        terms = {
            "loss_policy": clipped_surrogate_loss(logp, behaviour_logp, advantages, cfg.clip),
            "loss_value": cfg.vf_coef * value_loss(values, vs),
            "loss_entropy": cfg.ent_coef * entropy_loss(entropy),
        }
        ratio = torch.exp(logp.detach() - behaviour_logp)
        return {
            **terms,
            "total": sum(terms.values()),
            "entropy": entropy.mean().detach(),
            "mean_rho": ratio.mean(),
            "clip_fraction": ((ratio - 1.0).abs() > cfg.clip).float().mean(),
        }

    def learn_on_batch(self, batch: SampleBatch) -> Info:
        """Takes ``num_sgd_iter`` gradient steps on the whole `batch`.

        Returns:
            The mean of each loss term and diagnostic over the steps, plus
            ``num_sgd_steps``.
        """
        steps = []
        for _ in range(self.config.num_sgd_iter):
            steps.append(self._backward_terms(self.loss(batch), rows=len(batch)))
            self._step()
        means = {
            name: float(torch.stack([s[name].detach() for s in steps]).mean()) for name in steps[0]
        }
        return {**means, "num_sgd_steps": float(len(steps))}


def __getattr__(name: str):  # the config's old name, APPOConfig
    return renamed(__name__, name, ("APPOConfig",))
