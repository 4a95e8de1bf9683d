"""Conservative Q-learning on SAC: continuous and discrete actions, learned offline.

SAC's losses (`hrl_tasks.policies.sac`) plus, for each critic, ``min_q_weight``
times CQL(H)'s term (Kumar et al. 2020): ``logsumexp`` of Q over actions less Q of
the recorded action. With Box actions the ``logsumexp`` covers ``num_actions``
uniform actions and as many from the current policy at ``s`` and at ``s'``, each
less its log-density (the importance-sampled estimate of the CQL paper, as RLlib
and d3rlpy compute it); with Discrete ones it is exact, over every action.
"""

from __future__ import annotations

import math

import torch

from hrl_tasks.policies.configs import CQLPolicyConfig, renamed
from hrl_tasks.policies.losses import cql_penalty
from hrl_tasks.policies.sac import SACPolicy


class CQLPolicy(SACPolicy):
    """SAC with CQL's conservative term on both critics (``loss_cql`` in the terms)."""

    config_class = CQLPolicyConfig

    def _box_loss(self, cols):
        terms = super()._box_loss(cols)
        cfg, obs = self.config, cols["obs"]
        n, size = cfg.num_actions, len(obs)
        obs_rep = obs.repeat_interleave(n, 0)
        with torch.no_grad():
            policy_actions, policy_logp = self._sample(obs_rep)
            next_actions, next_logp = self._sample(cols["next_obs"].repeat_interleave(n, 0))
        uniform = torch.rand(size * n, self.action_dim, generator=self.generator) * 2 - 1
        uniform_logp = -self.action_dim * math.log(2.0)  # density of U[-1, 1]^d
        groups = []  # per kind of action: (q1, q2) of the [B * n] actions, less log-densities
        for actions, logp in (
            (uniform, uniform_logp),
            (policy_actions, policy_logp),
            (next_actions, next_logp),
        ):
            q1, q2 = self.model.critic(obs_rep, actions)
            groups.append((q1 - logp, q2 - logp))
        q_data = self.model.critic(obs, cols["actions"])
        penalty = sum(
            cql_penalty(
                torch.cat([g[k].view(size, n) for g in groups], dim=1),
                q_data[k],
                cfg.cql_temperature,
            )
            for k in range(2)
        )
        return self._with_penalty(terms, penalty)

    def _discrete_loss(self, cols):
        terms = super()._discrete_loss(cols)
        q1_all, q2_all = self.model.critic(cols["obs"])
        taken = cols["actions"].unsqueeze(-1)
        penalty = sum(
            cql_penalty(q_all, q_all.gather(-1, taken).squeeze(-1), self.config.cql_temperature)
            for q_all in (q1_all, q2_all)
        )
        return self._with_penalty(terms, penalty)

    def _with_penalty(self, terms, penalty):
        loss_cql = self.config.min_q_weight * penalty
        return {
            **terms,
            "loss_cql": loss_cql,
            "total": terms["total"] + loss_cql,
            "cql_penalty": penalty.detach(),
        }


def __getattr__(name: str):  # the config's old name, CQLConfig
    return renamed(__name__, name, ("CQLConfig",))
