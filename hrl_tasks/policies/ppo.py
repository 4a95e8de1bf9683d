"""Proximal policy optimization with the clipped surrogate (Schulman et al. 2017,
https://arxiv.org/abs/1707.06347), discrete and continuous.

The update follows CleanRL's ppo.py
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo.py): several epochs
of shuffled minibatches, advantages standardized per minibatch, global gradient
norm clipping, Adam with eps 1e-5, optional early stop on the approximate KL.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.actor_critic import ActorCriticPolicy
from hrl_tasks.policies.adam import Adam
from hrl_tasks.policies.configs import PPOPolicyConfig, renamed
from hrl_tasks.policies.losses import clipped_surrogate_loss, entropy_loss, value_loss
from hrl_tasks.policies.postprocessing import add_gae
from hrl_tasks.policies.torch_policy import adam
from hrl_tasks.policies.torch_utils import Info, minibatch_indices


class PPOPolicy(ActorCriticPolicy):
    """PPO-clip policy.

    `postprocess_trajectory` reads ``rewards``, ``values``, ``next_values``,
    ``terminateds``, ``truncateds`` of one env's fragment (see
    `hrl_tasks.policies.actor_critic`) and adds GAE ``advantages`` and
    ``value_targets``. `loss` reads ``obs``, ``actions``, ``logp`` (behaviour),
    ``advantages``, ``value_targets`` and, with ``vf_clip``, ``values``.

    Usage::

        policy = PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0))
        batch = SampleBatch.concat_samples([policy.postprocess_trajectory(f) for f in fragments])
        info = policy.learn_on_batch(batch)  # num_sgd_iter epochs of minibatches

    `compute_gradients` / `apply_gradients` take one step on the whole batch
    (for gradient-averaging plans); `learn_on_batch` runs the epochs.

    Args:
        observation_space: A Box space.
        action_space: Discrete or 1-D Box.
        config: A `PPOPolicyConfig`; None uses the defaults.
    """

    config_class = PPOPolicyConfig

    def make_optimizer(self, model: nn.Module) -> Adam:
        return adam(model.parameters(), lr=self.config.lr, eps=1e-5)

    def data_parallel_unit(self) -> int | None:
        """Every learner of a group takes the whole batch and its part of each
        minibatch, so that the group shuffles as one learner would."""
        return None

    def postprocessor(self):
        """Adds GAE ``advantages`` and ``value_targets``."""
        return partial(add_gae, gamma=self.config.gamma, lam=self.config.lam)

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_policy``, ``loss_value``, ``loss_entropy``; diagnostics ``entropy``,
        ``kl`` (approximate ``KL(old || new)``) and ``clip_fraction``."""
        return self._loss(self._tensors(batch))

    def _tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The columns `loss` reads, as tensors (once per `learn_on_batch`, not per step)."""
        discrete = np.issubdtype(self.action_space.dtype, np.integer)
        names = [SampleBatch.LOGP, SampleBatch.ADVANTAGES, SampleBatch.VALUE_TARGETS]
        if self.config.vf_clip is not None:
            names.append(SampleBatch.VALUES)
        return {
            SampleBatch.OBS: self.obs_tensor(batch[SampleBatch.OBS]),
            SampleBatch.ACTIONS: self.column(
                batch, SampleBatch.ACTIONS, np.int64 if discrete else np.float32
            ),
            **{name: self.column(batch, name) for name in names},
        }

    def _loss(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.config
        dist, values = self.model(data[SampleBatch.OBS])
        logp = dist.logp(data[SampleBatch.ACTIONS])
        old_logp = data[SampleBatch.LOGP]
        advantages = data[SampleBatch.ADVANTAGES]
        if cfg.normalize_advantages:
            advantages = self.standardize(advantages)
        targets = data[SampleBatch.VALUE_TARGETS]
        old_values = data.get(SampleBatch.VALUES)
        terms = {
            "loss_policy": clipped_surrogate_loss(logp, old_logp, advantages, cfg.clip),
            "loss_value": cfg.vf_coef * value_loss(values, targets, cfg.vf_clip, old_values),
        }
        if cfg.ent_coef:
            entropy = dist.entropy()
            terms["loss_entropy"] = cfg.ent_coef * entropy_loss(entropy)
        with torch.no_grad():
            if not cfg.ent_coef:  # a diagnostic only: kept out of the backward pass
                entropy = dist.entropy()
                terms["loss_entropy"] = torch.zeros(())
            # k3 estimator, http://joschu.net/blog/kl-approx.html (as CleanRL's approx_kl).
            log_ratio = logp - old_logp
            ratio = log_ratio.exp()
            kl = (ratio - 1.0 - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip).float().mean()
        return {
            **terms,
            "total": sum(terms.values()),
            "entropy": entropy.mean().detach(),
            "kl": kl,
            "clip_fraction": clip_fraction,
        }

    def learn_on_batch(self, batch: SampleBatch) -> Info:
        """Runs ``num_sgd_iter`` epochs of shuffled minibatches over `batch`.

        Returns:
            The mean of each loss term and diagnostic over all minibatch steps,
            plus ``num_sgd_steps``.
        """
        cfg = self.config
        data = self._tensors(batch)
        steps: list[dict[str, torch.Tensor]] = []
        group = self.data_parallel
        for _ in range(cfg.num_sgd_iter):
            seed = int(torch.randint(2**62, (), generator=self.generator))
            for rows in minibatch_indices(len(batch), cfg.minibatch_size, seed):
                if group is not None:  # this learner's part of the group's minibatch
                    rows = group.my_rows(rows, len(batch))
                minibatch = data if rows is None else {k: v[rows] for k, v in data.items()}
                n_rows = len(batch) if rows is None else len(rows)
                steps.append(self._backward_terms(self._loss(minibatch), rows=n_rows))
                self._step()
            if cfg.target_kl is not None:
                kl = steps[-1]["kl"] if group is None else group.mean(steps[-1]["kl"], n_rows)
                if float(kl) > cfg.target_kl:
                    break
        means = {
            name: float(torch.stack([s[name].detach() for s in steps]).mean()) for name in steps[0]
        }
        return {**means, "num_sgd_steps": float(len(steps))}


def __getattr__(name: str):  # the config's old name, PPOConfig
    return renamed(__name__, name, ("PPOConfig",))
