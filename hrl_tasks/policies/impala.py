"""IMPALA's V-trace actor-critic (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561).

The learner's policy differs from the actors' that made the data; V-trace
(`estimators.vtrace`) corrects for it with truncated importance weights
``pi(a|x) / mu(a|x)``, using the behaviour ``logp`` stored by the actors.
"""

from __future__ import annotations

import numpy as np
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.actor_critic import ActorCriticPolicy
from hrl_tasks.policies.configs import IMPALAPolicyConfig, renamed
from hrl_tasks.policies.estimators import vtrace
from hrl_tasks.policies.losses import entropy_loss, value_loss

_TIME_MAJOR_COLUMNS = (
    SampleBatch.OBS,
    SampleBatch.ACTIONS,
    SampleBatch.REWARDS,
    SampleBatch.TERMINATEDS,
    SampleBatch.TRUNCATEDS,
    SampleBatch.LOGP,
    SampleBatch.NEXT_VALUES,
)


class IMPALAPolicy(ActorCriticPolicy):
    """V-trace actor-critic policy.

    `postprocess_trajectory` is the identity: targets depend on the learner's
    current weights, so they are computed in `loss`. `loss` reads ``obs``,
    ``actions``, ``rewards``, ``terminateds``, ``truncateds``, ``logp`` (of
    the behaviour policy) and ``next_values`` (see
    `hrl_tasks.policies.actor_critic`), in time order: the whole batch is one
    fragment (columns ``[T]`` or ``[T, N]``), or with
    ``rollout_fragment_length=L`` consecutive fragments of ``L`` rows, each from
    one env. Values ``V(x_t)`` come from the learner; the bootstrap value at a
    fragment end and the value at a truncation come from ``next_values``, as
    the actor computed them. A truncation at ``t`` is bootstrapped exactly by
    using reward ``r_t + gamma * next_values[t]`` and discount 0 there.

    Loss: ``-mean(pg_adv * log pi(a|x)) + vf_coef * 0.5 mean((V(x) - vs)^2)
    - ent_coef * mean(H)`` with ``(vs, pg_adv)`` from `estimators.vtrace`.

    Args:
        observation_space: A Box space.
        action_space: Discrete or 1-D Box.
        config: An `IMPALAPolicyConfig`; None uses the defaults.
    """

    config_class = IMPALAPolicyConfig

    def data_parallel_unit(self) -> int | None:
        """A learner group splits the batch into whole fragments (V-trace runs along
        each); without ``rollout_fragment_length`` every learner takes all of it."""
        return self.config.rollout_fragment_length

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_policy``, ``loss_value``, ``loss_entropy``; ``entropy`` and ``mean_rho``
        (the mean unclipped importance weight ``pi / mu``)."""
        cfg = self.config
        tm = self.time_major(batch)
        dist, values, logp = self.forward_batch(tm)
        vs, pg_advantages = self.vtrace_targets(tm, values, logp)
        entropy = dist.entropy()
        terms = {
            "loss_policy": -(pg_advantages * logp).mean(),
            "loss_value": cfg.vf_coef * value_loss(values, vs),
            "loss_entropy": cfg.ent_coef * entropy_loss(entropy),
        }
        mean_rho = torch.exp(logp.detach() - self.column(tm, SampleBatch.LOGP)).mean()
        return {
            **terms,
            "total": sum(terms.values()),
            "entropy": entropy.mean().detach(),
            "mean_rho": mean_rho,
        }

    def vtrace_targets(
        self, tm: SampleBatch, values: torch.Tensor, logp: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`estimators.vtrace` on a time-major batch, for the learner's ``V(x_t)`` and
        ``log pi(a_t|x_t)``.

        Args:
            tm: The columns of `time_major`.
            values: ``V(x_t)`` of ``tm["obs"]`` (gradients are not followed).
            logp: ``log pi(a_t|x_t)`` of ``tm["actions"]`` (gradients are not followed).

        Returns:
            ``(vs, pg_advantages)`` as float32 tensors shaped like `values`: the value
            targets and ``rho_pg_t * (r_t + gamma * vs_{t+1} - V(x_t))``.
        """
        cfg = self.config
        terminateds = np.asarray(tm[SampleBatch.TERMINATEDS], bool)
        truncateds = np.asarray(tm[SampleBatch.TRUNCATEDS], bool) & ~terminateds
        next_values = np.asarray(tm[SampleBatch.NEXT_VALUES], np.float32)
        rewards = np.asarray(tm[SampleBatch.REWARDS], np.float32)
        vs, pg_advantages = vtrace(
            behaviour_logp=np.asarray(tm[SampleBatch.LOGP], np.float32),
            target_logp=logp.detach().numpy(),
            rewards=rewards + cfg.gamma * truncateds * next_values,
            values=values.detach().numpy(),
            bootstrap_value=next_values[-1],  # discount 0 makes it unused if the episode ended
            discounts=cfg.gamma * ~(terminateds | truncateds),
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_c_threshold=cfg.clip_c_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
        )
        return (
            torch.from_numpy(vs.astype(np.float32)),
            torch.from_numpy(pg_advantages.astype(np.float32)),
        )

    def time_major(self, batch: SampleBatch) -> SampleBatch:
        """The columns the loss reads, reshaped to ``[L, B, ...]`` when fragments are concatenated.

        Raises:
            KeyError: If a column is missing.
            ValueError: If the batch length is not a multiple of ``rollout_fragment_length``.
        """
        missing = [c for c in _TIME_MAJOR_COLUMNS if c not in batch]
        if missing:
            raise KeyError(f"IMPALAPolicy.loss needs columns {missing}; have {batch.columns}")
        length = self.config.rollout_fragment_length
        if length is None:
            return SampleBatch({c: batch[c] for c in _TIME_MAJOR_COLUMNS})
        if len(batch) % length:
            raise ValueError(
                f"batch of {len(batch)} rows is not whole fragments of rollout_fragment_length={length}"
            )
        return SampleBatch(
            {
                c: batch[c].reshape(-1, length, *batch[c].shape[1:]).swapaxes(0, 1)
                for c in _TIME_MAJOR_COLUMNS
            }
        )


def __getattr__(name: str):  # the config's old name, IMPALAConfig
    return renamed(__name__, name, ("IMPALAConfig",))
