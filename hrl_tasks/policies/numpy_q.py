"""`NumpyQNetwork`: a DQN policy's Q-network acting epsilon-greedily in numpy, for rollout workers.

The acting half of `DQNPolicy` for an MLP on flattened Box observations, as
`NumpyActorCritic` is for the actor-critics: a rollout worker of DQN or Ape-X
that only samples needs the forward pass, and numpy does it for a small MLP
several times faster than torch (and without importing torch)::

    copy = policy.inference_copy()             # NumpyQNetwork, same weights and epsilon
    copy.set_epsilon(0.1)
    actions, _ = copy.compute_actions(obs)     # greedy, each random with probability epsilon
    copy.set_weights(policy.get_weights())     # the torch state dict's names

The model is `hrl_tasks.policies.models.QNetwork`: a ReLU ``trunk``, an
``advantage`` head and, when dueling, a ``value`` head
(``Q = V + A - mean(A)``); illegal actions of a masked observation get `MASKED`
and are never drawn at random. Greedy actions equal the torch policy's up to
float32 rounding (ties aside); the random draws come from a numpy generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.numpy_actor_critic import ACTIVATIONS, NumpyActingCopy, linear_layers, mlp
from hrl_tasks.policies.spaces import MASKED


def checked_epsilon(epsilon: float) -> float:
    """``epsilon`` as a float, the probability of a random action.

    Raises:
        ValueError: If it is outside [0, 1].
    """
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    return float(epsilon)


class NumpyQNetwork(NumpyActingCopy):
    """The acting half of a `DQNPolicy`, in numpy.

    Args:
        observation_space: A Box space (observations are flattened).
        action_space: A Discrete space starting at 0.
        weights: The torch policy's `get_weights()`.
        epsilon: The probability of a uniformly random action when exploring.
        postprocess: ``fragment -> fragment`` that `postprocess_trajectory` applies
            (torch-free and picklable: the n-step rewrite); None: unchanged.
        seed: Seed of the generator; None draws one.

    Raises:
        ValueError: If ``weights`` do not describe a Q-network that fits the spaces.
    """

    learns_with = "the DQNPolicy it was copied from"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        weights: dict[str, np.ndarray],
        epsilon: float = 0.0,
        postprocess: Callable[[SampleBatch], SampleBatch] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, postprocess, seed)
        self.mask_size = int(getattr(observation_space, "mask_size", 0))
        self.set_epsilon(epsilon)
        self.set_weights(weights)

    def set_epsilon(self, epsilon: float) -> None:
        """As `DQNPolicy.set_epsilon` (`checked_epsilon`)."""
        self.epsilon = checked_epsilon(epsilon)

    # Weights ------------------------------------------------------------------------

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Loads a torch `QNetwork` state dict (numpy arrays)."""
        self._weights = {name: np.array(value) for name, value in weights.items()}
        self._trunk = linear_layers(self._weights, "trunk.0")
        self._advantage = self._head("advantage")
        self._value = self._head("value") if "value.weight" in self._weights else None
        n_in = int(np.prod(self.observation_space.shape))
        first = (self._trunk[0][0] if self._trunk else self._advantage[0]).shape[0]
        if first != n_in or self._advantage[0].shape[1] != int(self.action_space.n):
            raise ValueError(
                f"weights map {first} inputs to {self._advantage[0].shape[1]} actions; the "
                f"spaces need {n_in} and {int(self.action_space.n)}"
            )

    def _head(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        try:
            weight, bias = self._weights[f"{name}.weight"], self._weights[f"{name}.bias"]
        except KeyError:
            raise ValueError(
                f"weights need '{name}.weight' and '{name}.bias'; got {sorted(self._weights)}"
            ) from None
        return np.ascontiguousarray(weight.T, dtype=np.float32), bias.astype(np.float32)

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self._weights.items()}

    # Acting -------------------------------------------------------------------------

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q-values ``[B, num_actions]`` (`MASKED` for illegal actions)."""
        obs = np.asarray(obs)
        shape = tuple(self.observation_space.shape)
        n_lead = obs.ndim - len(shape)
        if n_lead < 1 or obs.shape[n_lead:] != shape:
            raise ValueError(f"expected observations of shape [B, *{shape}], got {obs.shape}")
        features = obs.astype(np.float32).reshape(*obs.shape[:n_lead], -1)
        if self._trunk:
            features = mlp(features, self._trunk, ACTIVATIONS["relu"])
            np.maximum(features, 0.0, out=features)  # the trunk's last ReLU
        weight, bias = self._advantage
        q = features @ weight + bias
        if self._value is not None:
            weight, bias = self._value
            q = (features @ weight + bias) + q - q.mean(axis=-1, keepdims=True)
        if self.mask_size:
            q = np.where(obs[..., -self.mask_size :] > 0.5, q, np.float32(MASKED))
        return q

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Greedy actions, each replaced by a uniform one with probability epsilon if
        exploring; ``(int64 actions [B], {})``."""
        q = self.q_values(obs)
        actions = q.argmax(axis=-1)
        if explore and self.epsilon > 0.0:
            coin = self._rng.random(actions.shape) < self.epsilon
            if coin.any():
                actions = np.where(coin, self._uniform(obs, q), actions)
        return actions.astype(np.int64, copy=False), {}

    def _uniform(self, obs: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Uniformly random actions; only legal ones when observations carry a mask."""
        if not self.mask_size:
            return self._rng.integers(q.shape[-1], size=q.shape[:-1])
        scores = self._rng.random(q.shape)
        return np.where(q > MASKED, scores, -1.0).argmax(axis=-1)

    # State ----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Weights, epsilon and the generator's state."""
        return {"weights": self.get_weights(), "epsilon": self.epsilon, "rng": self.get_rng_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
        self.set_epsilon(state["epsilon"])
        self.set_rng_state(state["rng"])
