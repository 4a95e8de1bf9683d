"""What PG, PPO and IMPALA share: an actor-critic model and GAE postprocessing.

Rollout fragments come from one env, rows in time order, with the columns a
rollout worker writes for an actor-critic policy:

=================  ===========================================================
``obs``            ``s_t``
``actions``        ``a_t`` (from `compute_actions`)
``rewards``        ``r_t``
``terminateds``    ``s_{t+1}`` ended the episode by termination (value 0)
``truncateds``     ``s_{t+1}`` ended it by truncation (bootstrapped)
``logp``           ``log pi(a_t|s_t)`` of the behaviour policy (`compute_actions` extras)
``values``         ``V(s_t)`` (`compute_actions` extras)
``next_values``    ``V(s_{t+1})``; on truncated rows ``V`` of the final observation
                   before the reset; on the last row the bootstrap value
                   (`compute_values`). Ignored on terminated rows.
=================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies.distributions import ActionDistribution, make_action_dist
from hrl_tasks.policies.models import ActorCritic, ObsNormalizer, make_encoder
from hrl_tasks.policies.numpy_actor_critic import NumpyActorCritic
from hrl_tasks.policies.policy import Policy
from hrl_tasks.policies.torch_policy import TorchPolicy

TORCH_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
"""A config's ``activation`` -> the torch module (`NumpyActorCritic.ACTIVATIONS` the numpy one)."""


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over all entries (population std, so one entry gives 0)."""
    return (x - x.mean()) / (x.std(correction=0) + eps)


class ActorCriticPolicy(TorchPolicy):
    """A `TorchPolicy` over an `ActorCritic` model (base of PG, PPO and IMPALA).

    `compute_actions` samples (or takes the mode when ``explore=False``) and
    returns extras ``logp`` and ``values`` (float32, ``[B]``);
    `compute_values` gives the bootstrap values a rollout worker puts in
    ``next_values``. Actions from a Box space are not clipped to its bounds.
    The config needs ``hidden`` and ``shared_trunk`` besides `TorchPolicy`'s fields.

    Subclasses give their trajectory postprocessing as a torch-free function
    (`postprocessor`), which `postprocess_trajectory` applies and which
    `inference_copy` hands to the numpy copy for rollout workers.
    """

    reads_next_obs = False  # it learns from next_values, which the rollout worker computes

    def validate(self) -> None:
        """Raises ConfigError for an ``activation`` that is not a name of `TORCH_ACTIVATIONS`."""
        super().validate()
        if self.activation not in TORCH_ACTIVATIONS:
            raise ConfigError(
                f"{type(self.config).__name__}.activation must be one of "
                f"{', '.join(map(repr, TORCH_ACTIVATIONS))}, got {self.activation!r}"
            )

    @property
    def activation(self) -> str:
        """Between hidden layers: a config's ``activation`` (PPO's), else ``"tanh"``."""
        return getattr(self.config, "activation", "tanh")

    @property
    def reward_normalization_gamma(self) -> float | None:
        """``gamma`` with a config's ``normalize_rewards`` (PPO's), else None."""
        return self.config.gamma if getattr(self.config, "normalize_rewards", False) else None

    def standardize(self, x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """`normalize`, with the statistics of the whole batch in a learner group."""
        if self.data_parallel is None:
            return normalize(x, eps)
        mean, std = self.data_parallel.moments(x)
        return (x - mean) / (std + eps)

    @property
    def normalizes_observations(self) -> bool:
        """A config's ``normalize_observations`` (PPO's), else False."""
        return bool(getattr(self.config, "normalize_observations", False))

    def update_observation_stats(self, stats) -> None:
        if not self.normalizes_observations:
            super().update_observation_stats(stats)
        self.model.obs_normalizer.update(stats)

    def make_model(self) -> nn.Module:
        encoder, feature_dim = make_encoder(self.observation_space)
        head = make_action_dist(self.action_space, getattr(self.config, "log_std_init", 0.0))
        normalizer = (
            ObsNormalizer(self.observation_space.shape) if self.normalizes_observations else None
        )
        return ActorCritic(
            encoder,
            feature_dim,
            head,
            self.config.hidden,
            TORCH_ACTIVATIONS[self.activation],
            self.config.shared_trunk,
            mask_size=int(getattr(self.observation_space, "mask_size", 0)),
            actor_inputs=int(getattr(self.observation_space, "own_size", 0)),
            obs_normalizer=normalizer,
        )

    def postprocessor(self) -> Callable[[SampleBatch], SampleBatch] | None:
        """What `postprocess_trajectory` applies to a fragment: a picklable function
        without torch (e.g. ``partial(add_gae, gamma=..., lam=...)``); None: nothing."""
        return None

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        postprocess = self.postprocessor()
        return batch if postprocess is None else postprocess(batch)

    def inference_copy(self) -> Policy:
        """A `NumpyActorCritic` with these weights when the model is an MLP on
        flattened observations (no torch in the rollout process, and a cheaper
        step); a full copy for a CNN."""
        if not isinstance(self.model.encoder, nn.Flatten):
            return super().inference_copy()
        return NumpyActorCritic(
            self.observation_space,
            self.action_space,
            self.get_weights(),
            self.postprocessor(),
            activation=self.activation,
            reward_normalization_gamma=self.reward_normalization_gamma,
        )

    @torch.no_grad()
    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dist, values = self.model(self.obs_tensor(obs))
        actions = dist.sample(self.generator) if explore else dist.deterministic()
        extras = {SampleBatch.LOGP: dist.logp(actions).numpy(), SampleBatch.VALUES: values.numpy()}
        return self.to_actions(actions), extras

    @torch.no_grad()
    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        return self.model.value(self.obs_tensor(obs)).numpy()

    @torch.no_grad()
    def action_probs(self, obs: np.ndarray) -> np.ndarray:
        """Discrete actions: ``pi(.|s)`` at each of ``obs``, ``[N, n]`` (float64).

        Raises:
            TypeError: for a Box action space (it has densities, not probabilities).
        """
        dist, _ = self.model(self.obs_tensor(obs))
        if not hasattr(dist, "probs"):
            raise TypeError("action_probs needs Discrete actions")
        return dist.probs.numpy().astype(np.float64)

    @torch.no_grad()
    def sample_actions(self, obs: np.ndarray, k: int) -> np.ndarray:
        """``k`` actions drawn from ``pi(.|s)`` at each of ``obs``: ``[N, k, ...]``, as the
        model gives them (unclipped, as `action_logp` reads them)."""
        dist, _ = self.model(self.obs_tensor(np.repeat(np.asarray(obs), k, axis=0)))
        actions = dist.sample(self.generator).numpy()
        return actions.reshape(len(obs), k, *actions.shape[1:])

    @torch.no_grad()
    def action_logp(self, batch: SampleBatch) -> np.ndarray:
        """``log pi(a|s)`` of ``batch``'s ``actions`` at its ``obs`` (float64), e.g. for
        off-policy estimates."""
        return self.forward_batch(batch)[2].numpy().astype(np.float64)

    def forward_batch(
        self, batch: SampleBatch
    ) -> tuple[ActionDistribution, torch.Tensor, torch.Tensor]:
        """Runs the model on ``batch["obs"]``.

        Returns:
            ``(dist, values, logp)`` with ``logp`` of ``batch["actions"]``; all
            carry gradients.
        """
        obs = self.obs_tensor(batch[SampleBatch.OBS])
        dist, values = self.model(obs)
        discrete = np.issubdtype(self.action_space.dtype, np.integer)
        actions = self.column(batch, SampleBatch.ACTIONS, np.int64 if discrete else np.float32)
        return dist, values, dist.logp(actions)
