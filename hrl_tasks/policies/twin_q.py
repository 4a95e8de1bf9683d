"""What SAC and TD3 share: twin Q critics with slow targets, actions scaled to [-1, 1],
uniform actions before learning starts, and n-step transitions from replay.

Fujimoto et al. 2018 (TD3, clipped double Q, https://arxiv.org/abs/1802.09477);
Haarnoja et al. 2018 (SAC, https://arxiv.org/abs/1812.05905). The networks and
defaults are those of Stable-Baselines3 (ReLU MLPs; the critics read the
observation and the action concatenated).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.models import MLP, ObsNormalizer
from hrl_tasks.policies.postprocessing import N_STEP_DISCOUNTS, n_step_transitions
from hrl_tasks.policies.spaces import UnsupportedSpaceError
from hrl_tasks.policies.torch_policy import TorchPolicy
from hrl_tasks.policies.torch_utils import load_module_weights, module_weights


class TwinQ(nn.Module):
    """Two independent Q networks: ``Q(s, a)`` for Box actions (the action, scaled to
    [-1, 1], joins the flattened observation), or ``Q(s, .)`` over every action for
    Discrete ones."""

    def __init__(self, obs_dim: int, action_dim: int, discrete: bool, hidden) -> None:
        super().__init__()
        self.discrete = discrete
        in_dim, out_dim = (obs_dim, action_dim) if discrete else (obs_dim + action_dim, 1)
        self.q1 = MLP(in_dim, out_dim, hidden, nn.ReLU)
        self.q2 = MLP(in_dim, out_dim, hidden, nn.ReLU)

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q1, Q2)``: ``[B]`` each for Box actions, ``[B, n]`` for Discrete ones."""
        if self.discrete:
            return self.q1(obs), self.q2(obs)
        x = torch.cat([obs, actions], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class TwinQPolicy(TorchPolicy):
    """A replay learner's policy over an ``actor`` and twin ``critic`` networks, with a
    target copy of the parts named in ``target_parts``.

    Box actions travel in the env's units (rows, ``compute_actions``) and are
    scaled to [-1, 1] inside (`to_unit`, `from_unit`): the actor's tanh squashes to
    that range. `set_uniform_actions` makes ``compute_actions(explore=True)`` draw
    uniformly from the action space (before ``learning_starts``, as
    Stable-Baselines3 does). `postprocess_trajectory` writes n-step transitions
    (`postprocessing.n_step_transitions`) when ``config.n_step > 1``.

    With ``config.normalize_observations`` the model holds an `ObsNormalizer`
    (``model.obs_normalizer``), applied to every observation the networks read.

    The config must have ``gamma``, ``tau``, ``n_step``, ``hidden`` and
    ``normalize_observations`` besides `TorchPolicy`'s keys.
    """

    supports_discrete: ClassVar[bool] = False
    target_parts: ClassVar[tuple[str, ...]] = ("critic",)

    def validate(self) -> None:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete) and self.supports_discrete:
            if int(space.start) != 0:
                raise UnsupportedSpaceError(
                    f"{self.algorithm_name} needs Discrete from 0, got {space!r}"
                )
            return
        box = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
        if not box or not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            kinds = "a 1-D Box with finite bounds" + (
                " or Discrete" if self.supports_discrete else ""
            )
            raise UnsupportedSpaceError(
                f"{self.algorithm_name} needs {kinds} action space, got {space!r}"
            )
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise UnsupportedSpaceError(
                f"{self.algorithm_name} needs a Box observation space, got {self.observation_space!r}"
            )

    @property
    def normalizes_observations(self) -> bool:
        return bool(self.config.normalize_observations)

    def update_observation_stats(self, stats) -> None:
        if not self.normalizes_observations:
            super().update_observation_stats(stats)
        self.model.obs_normalizer.update(stats)

    def make_normalizer(self) -> nn.Module:
        """The observation normalizer the model holds: an `ObsNormalizer` with
        ``normalize_observations``, else the identity."""
        if self.normalizes_observations:
            return ObsNormalizer(self.observation_space.shape)
        return nn.Identity()

    @property
    def algorithm_name(self) -> str:
        return type(self).__name__.removesuffix("Policy")

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.observation_space.shape))

    @property
    def action_dim(self) -> int:
        return int(self.action_space.n) if self.discrete else int(self.action_space.shape[0])

    def setup(self) -> None:
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.num_target_updates = 0
        self.uniform_actions = False
        if not self.discrete:
            low, high = (
                np.asarray(b, np.float32) for b in (self.action_space.low, self.action_space.high)
            )
            self._low, self._span = low, high - low
            self._low_t, self._span_t = torch.from_numpy(low), torch.from_numpy(high - low)

    def target_due(self) -> bool:
        """Whether `update_target` follows the update just made (SAC: after every one)."""
        return True

    # Actions ------------------------------------------------------------------------

    def set_uniform_actions(self, uniform: bool) -> None:
        """Draw exploring actions uniformly from the action space (True) or from the actor."""
        self.uniform_actions = bool(uniform)

    def uniform(self, n: int) -> np.ndarray:
        if self.discrete:
            return self.to_actions(torch.randint(self.action_dim, (n,), generator=self.generator))
        unit = torch.rand((n, self.action_dim), generator=self.generator) * 2.0 - 1.0
        return self.from_unit(unit.numpy())

    def from_unit(self, unit: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] to the env's units."""
        actions = self._low + (np.asarray(unit, np.float32) + 1.0) * 0.5 * self._span
        return actions.astype(self.action_space.dtype, copy=False)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        """The env's actions (a batch's column) to [-1, 1]."""
        return ((actions - self._low_t) / self._span_t * 2.0 - 1.0).clamp(-1.0, 1.0)

    def obs_features(self, obs: np.ndarray) -> torch.Tensor:
        """Observations, normalized (with ``normalize_observations``) and flattened to
        ``[B, obs_dim]`` floats."""
        tensor = self.model.obs_normalizer(self.obs_tensor(obs).float())
        return tensor.reshape(tensor.shape[0], self.obs_dim)

    # Learning -----------------------------------------------------------------------

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        return n_step_transitions(batch, self.config.gamma, self.config.n_step)

    def replay_columns(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The tensors every replay loss reads: ``obs``, ``next_obs``, ``actions``
        (unit-scaled for Box actions, int64 for Discrete ones), ``rewards``,
        ``discounts`` (``gamma^m (1 - terminated)``) and ``weights``
        (importance weights of prioritized replay, else ones)."""
        rewards = self.column(batch, SampleBatch.REWARDS)
        terminated = self.column(batch, SampleBatch.TERMINATEDS, bool)
        if N_STEP_DISCOUNTS in batch:
            discounts = self.column(batch, N_STEP_DISCOUNTS)
        else:
            discounts = (~terminated).float() * self.config.gamma
        if self.discrete:
            actions = self.column(batch, SampleBatch.ACTIONS, np.int64)
        else:
            actions = self.to_unit(self.column(batch, SampleBatch.ACTIONS))
        weights = (
            self.column(batch, SampleBatch.WEIGHTS)
            if SampleBatch.WEIGHTS in batch
            else torch.ones_like(rewards)
        )
        return {
            "obs": self.obs_features(batch[SampleBatch.OBS]),
            "next_obs": self.obs_features(batch[SampleBatch.NEXT_OBS]),
            "actions": actions,
            "rewards": rewards,
            "discounts": discounts,
            "weights": weights,
        }

    @torch.no_grad()
    def update_target(self, tau: float | None = None) -> None:
        """Moves the target parts toward the online ones: ``target = tau * online +
        (1 - tau) * target`` (Polyak averaging; 1 copies).

        Raises:
            ValueError: If `tau` is outside (0, 1].
        """
        tau = self.config.tau if tau is None else float(tau)
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        for part in self.target_parts:
            online = list(getattr(self.model, part).parameters())
            target = list(getattr(self.target_model, part).parameters())
            if tau == 1.0:
                torch._foreach_copy_(target, online)
            else:
                torch._foreach_lerp_(target, online, tau)
        self.num_target_updates += 1

    def get_state(self) -> dict[str, Any]:
        return {
            **super().get_state(),
            "target_weights": module_weights(self.target_model),
            "num_target_updates": self.num_target_updates,
            "uniform_actions": self.uniform_actions,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        load_module_weights(self.target_model, state["target_weights"])
        self.num_target_updates = int(state["num_target_updates"])
        self.uniform_actions = bool(state.get("uniform_actions", False))


def frozen(module: nn.Module):
    """A context in which ``module``'s parameters take no gradient (an actor's loss
    through the critics must not move them)."""
    import contextlib

    @contextlib.contextmanager
    def context():
        flags = [p.requires_grad for p in module.parameters()]
        module.requires_grad_(False)
        try:
            yield module
        finally:
            for p, flag in zip(module.parameters(), flags, strict=True):
                p.requires_grad_(flag)

    return context()
