"""MARWIL and behaviour cloning: imitation of recorded actions, weighted by advantage.

Loss on rows ``(s, a, G)`` of whole recorded episodes (``G`` the discounted return
from ``s``): ``-mean(w log pi(a|s)) + vf_coef * 0.5 mean((V(s) - G)^2)`` with
``w = exp(beta (G - V(s)) / c)``, ``c`` the square root of a slow moving average
of the squared advantages (Wang et al. 2018, "Exponentially Weighted Imitation
Learning for Batched Historical Data", NeurIPS; the moving average is RLlib's).
With ``beta = 0`` every weight is 1 and the value loss is off: behaviour cloning,
``-mean(log pi(a|s))``.
"""

from __future__ import annotations

from functools import partial

import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.actor_critic import ActorCriticPolicy
from hrl_tasks.policies.configs import MARWILPolicyConfig, renamed
from hrl_tasks.policies.losses import marwil_weights, value_loss
from hrl_tasks.policies.postprocessing import add_discounted_returns


class MARWILPolicy(ActorCriticPolicy):
    """MARWIL (``beta > 0``) or behaviour cloning (``beta = 0``) on an actor-critic model.

    `postprocess_trajectory` takes one whole recorded episode (or several, rows in
    time order) and adds ``value_targets``, the discounted returns. `loss` reads
    ``obs``, ``actions`` and ``value_targets``.
    """

    config_class = MARWILPolicyConfig

    def make_model(self):
        model = super().make_model()
        # c^2 of the paper, a buffer: saved and restored with the weights (RLlib starts at 100)
        model.register_buffer("advantage_norm_sq", torch.tensor(100.0))
        return model

    def postprocessor(self):
        """Adds ``value_targets`` (and ``advantages``): discounted returns, cut at episode ends."""
        return partial(add_discounted_returns, gamma=self.config.gamma)

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_policy`` and (with ``beta > 0``) ``loss_value``; ``advantage_norm``."""
        cfg = self.config
        dist, values, logp = self.forward_batch(batch)
        if cfg.beta == 0:  # behaviour cloning
            loss = -logp.mean()
            return {"loss_policy": loss, "total": loss}
        returns = self.column(batch, SampleBatch.VALUE_TARGETS)
        advantages = returns - values
        norm_sq = self.model.advantage_norm_sq
        with torch.no_grad():  # the moving average moves with each batch the loss sees
            rate = cfg.advantage_norm_update_rate
            norm_sq.mul_(1 - rate).add_(rate * advantages.pow(2).mean())
        weights = marwil_weights(advantages.detach(), norm_sq, cfg.beta)
        terms = {
            "loss_policy": -(weights * logp).mean(),
            "loss_value": cfg.vf_coef * value_loss(values, returns),
        }
        return {**terms, "total": sum(terms.values()), "advantage_norm": norm_sq.sqrt().detach()}


def __getattr__(name: str):  # the config's old name, MARWILConfig
    return renamed(__name__, name, ("MARWILConfig",))
