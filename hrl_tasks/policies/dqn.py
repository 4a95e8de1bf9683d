"""Deep Q-learning with double Q, a dueling head, n-step targets, importance weights,
a distributional head and noisy layers: each of Rainbow's parts, each switched by a key.

Mnih et al. 2015 (DQN), van Hasselt et al. 2016 (double DQN,
https://arxiv.org/abs/1509.06461), Wang et al. 2016 (dueling,
https://arxiv.org/abs/1511.06581), Schaul et al. 2016 (prioritized replay,
https://arxiv.org/abs/1511.05952), Bellemare et al. 2017 (C51,
https://arxiv.org/abs/1707.06887), Fortunato et al. 2018 (noisy nets,
https://arxiv.org/abs/1706.10295), Hessel et al. 2018 (Rainbow,
https://arxiv.org/abs/1710.02298).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import DQNPolicyConfig, renamed
from hrl_tasks.policies.estimators import categorical_projection, td_target_dqn
from hrl_tasks.policies.models import QNetwork, make_encoder, set_noise
from hrl_tasks.policies.numpy_q import NumpyQNetwork, checked_epsilon
from hrl_tasks.policies.policy import Policy
from hrl_tasks.policies.postprocessing import N_STEP_DISCOUNTS, n_step_transitions
from hrl_tasks.policies.spaces import UnsupportedSpaceError
from hrl_tasks.policies.torch_policy import TorchPolicy
from hrl_tasks.policies.torch_utils import load_module_weights, module_weights


class DQNPolicy(TorchPolicy):
    """Epsilon-greedy Q-learning policy with a target network.

    `postprocess_trajectory` is the identity for ``n_step == 1``; otherwise it
    reads ``rewards``, ``terminateds``, ``truncateds``, ``next_obs`` of one
    env's fragment and rewrites each row ``t`` as an n-step transition with
    `estimators.n_step_returns`: ``rewards`` = ``R_t``, ``next_obs``,
    ``terminateds``, ``truncateds`` taken from row ``b_t``, and a new
    ``discounts`` column = ``D_t``. ``next_obs`` on a truncated row must be the
    final observation before the reset.

    `loss` reads ``obs``, ``actions``, ``rewards``, ``next_obs``,
    ``terminateds``, and when present ``discounts`` (else ``config.gamma``)
    and ``weights`` (importance weights from prioritized replay, else 1):
    ``mean(w * huber(Q(s, a) - target))``. Its ``td_error`` entry, and
    ``info["td_error"]`` of `learn_on_batch` / `compute_gradients` (a numpy
    array, before the update), are the per-row TD errors for
    ``PrioritizedReplayBuffer.update_priorities``.

    Usage::

        policy = DQNPolicy(obs_space, Discrete(n), DQNPolicyConfig(seed=0))
        policy.set_epsilon(0.1); actions, _ = policy.compute_actions(obs)
        info = policy.learn_on_batch(replay.sample(32))
        replay.update_priorities(batch["batch_indexes"], np.abs(info["td_error"]))
        policy.update_target()  # every few hundred steps

    Args:
        observation_space: A Box space.
        action_space: A Discrete space.
        config: A `DQNPolicyConfig`; None uses the defaults.

    Raises:
        TypeError: If the action space is not Discrete.
        ValueError: If epsilon or n_step is out of range.
    """

    config_class = DQNPolicyConfig

    def validate(self) -> None:
        """Raises for an action space other than Discrete from 0, or ``n_step < 1``."""
        action_space = self.action_space
        if not isinstance(action_space, gym.spaces.Discrete) or int(action_space.start) != 0:
            raise UnsupportedSpaceError(
                f"DQN needs a Discrete action space starting at 0, got {action_space!r}"
            )
        cfg = self.config
        if cfg.n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {cfg.n_step}")
        if cfg.num_atoms < 1:
            raise ValueError(f"num_atoms must be >= 1 (1: a scalar Q), got {cfg.num_atoms}")
        if cfg.num_atoms > 1 and not cfg.v_min < cfg.v_max:
            raise ValueError(
                f"v_min must be below v_max for a distributional head, got {cfg.v_min} "
                f"and {cfg.v_max}"
            )

    def setup(self) -> None:
        """Builds the target network (a copy of the model) and sets ``config.epsilon``."""
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        set_noise(self.model, True, self.generator)
        set_noise(self.target_model, True, self.generator)
        self.set_epsilon(self.config.epsilon)
        self.num_target_updates = 0

    def make_model(self) -> nn.Module:
        encoder, feature_dim = make_encoder(self.observation_space)
        n = int(self.action_space.n)
        mask = int(getattr(self.observation_space, "mask_size", 0))
        cfg = self.config
        return QNetwork(
            encoder,
            feature_dim,
            n,
            cfg.hidden,
            nn.ReLU,
            cfg.dueling,
            mask,
            num_atoms=cfg.num_atoms,
            v_min=cfg.v_min,
            v_max=cfg.v_max,
            noisy=cfg.noisy,
            sigma0=cfg.sigma0,
        )

    def set_epsilon(self, epsilon: float) -> None:
        """Sets the probability of a uniformly random action when exploring.

        Raises:
            ValueError: If `epsilon` is outside [0, 1].
        """
        self.epsilon = checked_epsilon(epsilon)

    @torch.no_grad()
    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Greedy actions, each replaced by a uniform one with probability epsilon if
        exploring; with ``noisy``, greedy for freshly drawn weight noise if exploring,
        for the mean weights if not.

        Returns:
            ``(actions, {})``: int64 actions ``[B]`` and no extras.
        """
        obs = self.obs_tensor(obs)
        if self.config.noisy:
            set_noise(self.model, explore)
            try:
                return self.to_actions(self.model(obs).argmax(dim=-1)), {}
            finally:
                set_noise(self.model, True)
        actions = self.model(obs).argmax(dim=-1)
        if explore and self.epsilon > 0.0:
            uniform = self._uniform_actions(obs, actions.shape)
            coin = torch.rand(actions.shape, generator=self.generator) < self.epsilon
            actions = torch.where(coin, uniform, actions)
        return self.to_actions(actions), {}

    def _uniform_actions(self, obs: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Uniformly random actions; only legal ones when observations carry a mask."""
        n = int(self.action_space.n)
        if not self.model.mask_size:
            return torch.randint(n, shape, generator=self.generator)
        scores = torch.rand((*shape, n), generator=self.generator)
        legal = obs[..., -self.model.mask_size :] > 0.5
        return torch.where(legal, scores, torch.full_like(scores, -1.0)).argmax(dim=-1)

    def inference_copy(self) -> Policy:
        """A `NumpyQNetwork` with these weights and epsilon when the model is a plain
        MLP on flattened observations (no torch in the rollout process, and a cheaper
        step: Ape-X's samplers acted with the torch copy at about half the numpy loop's
        rate); a full copy for a CNN, a distributional head or noisy layers."""
        cfg = self.config
        if not isinstance(self.model.encoder, nn.Flatten) or cfg.noisy or cfg.num_atoms > 1:
            return super().inference_copy()
        postprocess = functools.partial(
            n_step_transitions, gamma=self.config.gamma, n_step=self.config.n_step
        )
        return NumpyQNetwork(
            self.observation_space, self.action_space, self.get_weights(), self.epsilon, postprocess
        )

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        """Rewrites rows as n-step transitions when ``n_step > 1`` (see the class doc)."""
        return n_step_transitions(batch, self.config.gamma, self.config.n_step)

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Term ``loss_td``; diagnostics ``td_error`` (per row) and ``q_mean``."""
        cfg = self.config
        obs = self.obs_tensor(batch[SampleBatch.OBS])
        actions = self.column(batch, SampleBatch.ACTIONS, np.int64)
        discounted = N_STEP_DISCOUNTS in batch
        gamma = self.column(batch, N_STEP_DISCOUNTS).numpy() if discounted else cfg.gamma
        rewards = self.column(batch, SampleBatch.REWARDS).numpy()
        terminateds = self.column(batch, SampleBatch.TERMINATEDS, bool).numpy()
        if SampleBatch.WEIGHTS in batch:
            weights = self.column(batch, SampleBatch.WEIGHTS)
        else:
            weights = torch.ones(len(actions))
        next_obs = self.obs_tensor(batch[SampleBatch.NEXT_OBS])
        if cfg.num_atoms > 1:
            return self._distributional_loss(
                obs, actions, next_obs, rewards, terminateds, gamma, weights
            )
        q = self.model(obs)
        q_taken = q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_q_target = self.target_model(next_obs).numpy()
            next_q_online = self.model(next_obs).numpy() if cfg.double_q else None
        targets = torch.from_numpy(
            td_target_dqn(rewards, next_q_target, terminateds, gamma, next_q_online).astype(
                np.float32
            )
        )
        huber = F.huber_loss(q_taken, targets, reduction="none", delta=cfg.huber_delta)
        loss_td = (weights * huber).mean()
        return {
            "loss_td": loss_td,
            "total": loss_td,
            "td_error": (q_taken - targets).detach(),
            "q_mean": q_taken.mean().detach(),
        }

    def _distributional_loss(self, obs, actions, next_obs, rewards, terminateds, gamma, weights):
        """C51's loss (see the class doc)."""
        model = self.model
        rows = torch.arange(len(actions))
        log_probs = model.logits(obs)[rows, actions].log_softmax(dim=-1)
        with torch.no_grad():
            next_probs = self.target_model.logits(next_obs).softmax(dim=-1)
            chooser = model if self.config.double_q else self.target_model
            next_actions = chooser(next_obs).argmax(dim=-1)
            target = categorical_projection(
                next_probs[rows, next_actions].numpy(),
                rewards,
                terminateds,
                gamma,
                model.support.numpy(),
            )
        cross_entropy = -(torch.from_numpy(target.astype(np.float32)) * log_probs).sum(dim=-1)
        loss_td = (weights * cross_entropy).mean()
        q_taken = (log_probs.detach().exp() * model.support).sum(dim=-1)
        return {
            "loss_td": loss_td,
            "total": loss_td,
            "td_error": cross_entropy.detach(),
            "q_mean": q_taken.mean(),
        }

    @torch.no_grad()
    def update_target(self, tau: float | None = None) -> None:
        """Moves the target network toward the online one: ``target = tau * online + (1 - tau) * target``.

        Args:
            tau: Mixing weight in (0, 1]; None uses ``config.tau``.

        Raises:
            ValueError: If `tau` is outside (0, 1].
        """
        tau = self.config.tau if tau is None else float(tau)
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        online = self.model.state_dict()
        for name, target in self.target_model.state_dict().items():
            if tau == 1.0:
                target.copy_(online[name])
            else:
                target.mul_(1.0 - tau).add_(online[name], alpha=tau)
        self.num_target_updates += 1

    def get_state(self) -> dict[str, Any]:
        return {
            **super().get_state(),
            "target_weights": module_weights(self.target_model),
            "epsilon": self.epsilon,
            "num_target_updates": self.num_target_updates,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        load_module_weights(self.target_model, state["target_weights"])
        self.set_epsilon(state["epsilon"])
        self.num_target_updates = int(state["num_target_updates"])


def __getattr__(name: str):  # the config's old name, DQNConfig
    return renamed(__name__, name, ("DQNConfig",))
