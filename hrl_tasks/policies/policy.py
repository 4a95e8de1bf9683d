"""The `Policy` interface.

Everything a policy exchanges with the outside is numpy: observations, actions,
gradients, weights and state. Weights and state are dicts of numpy arrays and
plain Python values, so they travel through `hrl_tasks.data.encode` (msgpack),
pickle, or Dask without torch on the wire. This module imports no torch: a
rollout process that acts with a numpy copy of a policy (`inference_copy`)
never loads it. `hrl_tasks.policies.torch_policy.TorchPolicy` is the generic
torch implementation.
"""

from __future__ import annotations

import abc
import copy
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from hrl_tasks.data import SampleBatch

if TYPE_CHECKING:
    import torch

Info = dict[str, Any]


class Policy(abc.ABC):
    """What acts in an env and learns from batches of its experience.

    A rollout worker and a learner use it like this::

        actions, extras = policy.compute_actions(obs)         # extras: e.g. logp, values
        batch = policy.postprocess_trajectory(fragment)        # e.g. adds advantages
        info = policy.learn_on_batch(batch)                    # or, split across processes:
        grads, info = policy.compute_gradients(batch); policy.apply_gradients(grads)
        worker_policy.set_weights(policy.get_weights())

    Args:
        observation_space: A gymnasium space; observations are batched, ``[B, *shape]``.
        action_space: A gymnasium space.
        config: The policy's config dataclass.
    """

    reads_next_obs = True
    """Whether learning reads ``next_obs`` (Q-learning does). A rollout worker drops
    the column from its batches when not: once ``next_values`` are computed,
    actor-critics never read it, and it is as large as ``obs`` (an Atari frame stack)."""

    reward_normalization_gamma: float | None = None
    """Set (to the discount) when the policy learns from rewards divided by the running
    standard deviation of the discounted return (Stable-Baselines3's
    ``VecNormalize(norm_reward=True)``): a rollout worker then scales the rewards of
    its batches (`hrl_tasks.rollout.reward_scaling`); episode returns stay the env's."""

    normalizes_observations = False
    """Whether the policy standardizes observations by running statistics: a rollout
    worker then reports those of what it saw (``metrics["obs_stats"]``), and the
    learner merges them (`update_observation_stats`) before it sends its weights."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config

    @abc.abstractmethod
    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Chooses an action per observation.

        Args:
            obs: A batch of observations, ``[B, *observation_space.shape]``.
            explore: Sample (or explore) if True, act greedily if False.

        Returns:
            ``(actions, extras)``: actions ``[B, ...]`` in the action space's
            dtype, and per-sample numpy arrays to store with them (e.g. ``logp``,
            ``values``), each ``[B]``.
        """

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        """State values, for bootstrapping at truncations and fragment ends.

        Args:
            obs: A batch of observations, ``[B, *observation_space.shape]``.

        Returns:
            ``V(obs)``, float32 ``[B]``.

        Raises:
            NotImplementedError: If the policy has no value function.
        """
        raise NotImplementedError(f"{type(self).__name__} has no value function")

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        """Adds derived columns (advantages, targets) to one env's time-major fragment.

        Args:
            batch: Rows in time order from a single env (see each policy for columns).

        Returns:
            A new batch; the default returns `batch` unchanged.
        """
        return batch

    def seed(self, seed: int) -> None:
        """Reseeds the policy's own randomness (exploration, shuffling).

        Rollout workers give each copy of a policy its own seed, so that
        copies do not explore in lockstep. The default has nothing to seed.

        Args:
            seed: A non-negative integer.
        """
        return None

    def inference_copy(self) -> Policy:
        """A copy for rollout workers that only act, never learn.

        It has this policy's weights, and `compute_actions`,
        `compute_values`, `postprocess_trajectory`, `get_weights` and
        `set_weights` that do what this policy's do. The default is a full
        copy; a policy may return something lighter (`ActorCriticPolicy`
        gives a `NumpyActorCritic` for MLP models: no torch in the rollout
        process).
        """
        return copy.deepcopy(self)

    @abc.abstractmethod
    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The loss terms on `batch`, TorchRL style.

        Args:
            batch: Postprocessed rows (see each policy for the columns it reads).

        Returns:
            A dict with a scalar ``"total"`` to minimize, weighted scalar
            ``loss_*`` terms that sum to it, and detached diagnostics (e.g.
            ``"entropy"``, ``"kl"``; DQN adds a per-sample ``"td_error"``).
        """

    @abc.abstractmethod
    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Info]:
        """Gradients of ``loss(batch)["total"]``, without applying them.

        Args:
            batch: Postprocessed rows.

        Returns:
            ``(grads, info)``: one numpy array per parameter, and the info of `learn_on_batch`.
        """

    @abc.abstractmethod
    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """Takes one optimizer step.

        Args:
            grads: As returned by `compute_gradients` (possibly averaged over workers).
        """

    def learn_on_batch(self, batch: SampleBatch) -> Info:
        """Updates the policy on `batch`.

        Args:
            batch: Postprocessed rows.

        Returns:
            Info: floats (losses, diagnostics), plus per-sample arrays where a
            policy documents them (DQN's ``"td_error"``).
        """
        grads, info = self.compute_gradients(batch)
        self.apply_gradients(grads)
        return info

    @abc.abstractmethod
    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's parameters and buffers as name -> numpy array (copies)."""

    @abc.abstractmethod
    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Loads weights.

        Args:
            weights: From `get_weights` of a policy built with the same spaces and config.
        """

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Everything needed to resume learning: weights, optimizer, RNG, counters.

        Returns:
            Nested dicts of numpy arrays and plain values (encodable by `hrl_tasks.data.encode`).
        """

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Restores a `get_state` result (also after an encode/decode round trip)."""

    def update_observation_stats(self, stats: Any) -> None:
        """Merges observation statistics (a `RunningStats`) gathered by rollout workers.

        Raises:
            NotImplementedError: for a policy that does not normalize observations.
        """
        raise NotImplementedError(f"{type(self).__name__} does not normalize observations")

    def get_rng_state(self) -> Any:
        """The state of the policy's own random numbers (sampling, exploration), as
        plain data; None for a policy that has none. Part of `get_state` too."""
        return None

    def set_rng_state(self, state: Any) -> None:
        """Restores a `get_rng_state` result."""
        if state is not None:
            raise ValueError(f"{type(self).__name__} has no random-number state to restore")
