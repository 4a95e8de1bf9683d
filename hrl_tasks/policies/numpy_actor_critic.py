"""`NumpyActorCritic`: an actor-critic MLP that acts in numpy, for rollout workers.

A rollout worker that only samples needs the forward pass, not autograd. For the
small MLPs of classic control, numpy does that pass several times faster than
torch (a torch op costs microseconds of dispatch whatever its size), and a
process that acts in numpy never imports torch, which saves each rollout
process about 1.5 s of start-up. `ActorCriticPolicy.inference_copy` builds one::

    copy = policy.inference_copy()                # NumpyActorCritic, same weights
    actions, extras = copy.compute_actions(obs)   # extras: logp, values (float32)
    copy.set_weights(policy.get_weights())        # the torch state dict's names

The model is `hrl_tasks.policies.models.ActorCritic` over a flattened Box
observation: an optional shared ``trunk`` (tanh after every layer), then
``actor`` and ``critic`` MLPs (tanh between layers). Discrete actions follow a
categorical distribution over the actor's logits; Box actions a diagonal
Gaussian with the state-independent ``dist_head.log_std``. Sampled actions,
log-probabilities and values equal the torch policy's up to float32 rounding;
the random draws come from a numpy generator, not torch's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.data.rng import generator_from_state, generator_state
from hrl_tasks.policies.policy import Info, Policy
from hrl_tasks.policies.spaces import MASKED, UnsupportedSpaceError

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
Layers = list[tuple[np.ndarray, np.ndarray]]  # (weight [in, out], bias [out]) per linear layer


class NumpyActingCopy(Policy):
    """What the numpy acting copies of torch policies share: a postprocessing function,
    a numpy generator (seeded, and part of the state), and learning refused with a
    pointer to ``learns_with``, the policy to learn with."""

    learns_with = "the torch policy it was copied from"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        postprocess: Callable[[SampleBatch], SampleBatch] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, config=None)
        self.postprocess = postprocess
        self._rng = np.random.default_rng(seed)

    def postprocess_trajectory(self, batch: SampleBatch) -> SampleBatch:
        return batch if self.postprocess is None else self.postprocess(batch)

    def seed(self, seed: int) -> None:
        """Reseeds the generator."""
        self._rng = np.random.default_rng(int(seed))

    def loss(self, batch: SampleBatch) -> Any:
        raise self._acts_only()

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Info]:
        raise self._acts_only()

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        raise self._acts_only()

    def _acts_only(self) -> NotImplementedError:
        return NotImplementedError(
            f"{type(self).__name__} only acts: learn with {self.learns_with} (rollout "
            "workers that compute gradients need a full copy of it)"
        )

    def get_rng_state(self) -> dict[str, Any]:
        return generator_state(self._rng)

    def set_rng_state(self, state: dict[str, Any]) -> None:
        self._rng = generator_from_state(state)


class NumpyActorCritic(NumpyActingCopy):
    """The acting half of an `ActorCriticPolicy`, in numpy.

    Args:
        observation_space: A Box space (observations are flattened).
        action_space: Discrete, or a 1-D Box.
        weights: The torch policy's `get_weights()`.
        postprocess: ``fragment -> fragment`` that `postprocess_trajectory`
            applies (torch-free and picklable, e.g. ``partial(add_gae, ...)``);
            None returns fragments unchanged.
        seed: Seed of the generator for sampling; None draws one.
        activation: Between hidden layers: ``"tanh"`` or ``"relu"`` (the torch model's).
        reward_normalization_gamma: The torch policy's (`Policy.reward_normalization_gamma`).

    Raises:
        ValueError: If `weights` do not describe an actor and a critic that fit the spaces.
    """

    reads_next_obs = False  # as the `ActorCriticPolicy` it copies

    @property
    def normalizes_observations(self) -> bool:
        """Whether the weights carry observation statistics (``obs_normalizer.*``)."""
        return self._normalizer is not None

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        weights: dict[str, np.ndarray],
        postprocess: Callable[[SampleBatch], SampleBatch] | None = None,
        seed: int | None = None,
        activation: str = "tanh",
        reward_normalization_gamma: float | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, postprocess, seed)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self._activate = ACTIVATIONS[activation]
        self.reward_normalization_gamma = reward_normalization_gamma
        if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.Box):
            raise UnsupportedSpaceError(f"unsupported action space {action_space!r}")
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.mask_size = int(getattr(observation_space, "mask_size", 0))
        self.actor_inputs = int(getattr(observation_space, "own_size", 0))
        self.set_weights(weights)

    # Weights ------------------------------------------------------------------------

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Loads a torch `ActorCritic` state dict (numpy arrays)."""
        self._weights = {name: np.array(value) for name, value in weights.items()}
        self._trunk = linear_layers(self._weights, "trunk")
        self._actor = linear_layers(self._weights, "actor")
        self._critic = linear_layers(self._weights, "critic")
        mean = self._weights.get("obs_normalizer.mean")
        self._normalizer = (
            None
            if mean is None
            else (
                mean.astype(np.float32),
                np.sqrt(self._weights["obs_normalizer.var"].astype(np.float32) + np.float32(1e-8)),
            )
        )
        log_std = self._weights.get("dist_head.log_std")
        self._log_std = None if log_std is None else log_std.astype(np.float32)
        self._check_shapes()

    def get_weights(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self._weights.items()}

    def _check_shapes(self) -> None:
        if not self._actor or not self._critic:
            raise ValueError(
                f"weights need 'actor.*' and 'critic.*' linear layers; got {sorted(self._weights)}"
            )
        n_in = int(np.prod(self.observation_space.shape))
        first = (self._trunk or self._critic)[0][0].shape[0]
        n_out = self.action_space.n if self.discrete else self.action_space.shape[0]
        if first != n_in or self._actor[-1][0].shape[1] != n_out:
            raise ValueError(
                f"weights map {first} inputs to {self._actor[-1][0].shape[1]} actor outputs; "
                f"the spaces need {n_in} and {n_out}"
            )
        if not self.discrete and self._log_std is None:
            raise ValueError("a Box action space needs 'dist_head.log_std' in the weights")

    # Acting -------------------------------------------------------------------------

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        features = self._features(obs)
        own = features[..., : self.actor_inputs] if self.actor_inputs else features
        head = mlp(own, self._actor, self._activate)
        values = mlp(features, self._critic, self._activate)[..., 0]
        if self.mask_size:  # as the torch model's apply_mask: illegal actions get no probability
            head = np.where(np.asarray(obs)[..., -self.mask_size :] > 0.5, head, np.float32(MASKED))
        if self.discrete:
            actions, logp = self._categorical(head, explore)
        else:
            actions, logp = self._gaussian(head, explore)
        extras = {SampleBatch.LOGP: logp, SampleBatch.VALUES: values}
        return actions.astype(self.action_space.dtype, copy=False), extras

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        return mlp(self._features(obs), self._critic, self._activate)[..., 0]

    def _features(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        shape = tuple(self.observation_space.shape)
        n_lead = obs.ndim - len(shape)
        if n_lead < 1 or obs.shape[n_lead:] != shape:
            raise ValueError(f"expected observations of shape [B, *{shape}], got {obs.shape}")
        features = obs.astype(np.float32)
        if self._normalizer is not None:  # as ObsNormalizer: standardized, clipped to +-10
            mean, std = self._normalizer
            features = np.clip((features - mean) / std, -10.0, 10.0)
        features = features.reshape(*obs.shape[:n_lead], -1)
        for weight, bias in self._trunk:
            features = self._activate(features @ weight + bias)
        return features

    def _categorical(self, logits: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        flat = logits.reshape(-1, logits.shape[-1])
        shifted = flat - flat.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        if explore:  # inverse CDF: the first action whose cumulative weight exceeds u * total,
            # the CDF's own last entry as the total, so that a zero-weight (masked) action,
            # whose entry equals the one before it, is never the first to exceed it
            cdf = np.cumsum(exp, axis=1)
            u = self._rng.random((len(flat), 1), dtype=np.float32) * cdf[:, -1:]
            actions = np.minimum((cdf < u).sum(axis=1), flat.shape[1] - 1)
        else:
            actions = shifted.argmax(axis=1)
        rows = np.arange(len(flat))
        logp = shifted[rows, actions] - np.log(total[:, 0])
        return actions.reshape(logits.shape[:-1]), logp.reshape(logits.shape[:-1])

    def _gaussian(self, mean: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        log_std = np.broadcast_to(self._log_std, mean.shape)
        std = np.exp(log_std)
        if explore:
            actions = mean + std * self._rng.standard_normal(mean.shape, dtype=np.float32)
        else:
            actions = mean
        z = (actions - mean) / std
        logp = (-0.5 * z**2 - log_std - _HALF_LOG_2PI).sum(axis=-1, dtype=np.float32)
        return actions, logp

    # State ----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Weights and the generator's state."""
        return {"weights": self.get_weights(), "rng": self.get_rng_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
        self.set_rng_state(state["rng"])


def linear_layers(weights: dict[str, np.ndarray], prefix: str) -> Layers:
    """The linear layers under ``prefix.`` in the order of their module paths."""
    layers = []
    for name in weights:
        if name.startswith(prefix + ".") and name.endswith(".weight"):
            path = name[len(prefix) + 1 : -len(".weight")]
            order = tuple(int(part) for part in path.split("."))
            bias = weights.get(f"{prefix}.{path}.bias")
            if bias is None:
                raise ValueError(f"weights have {name!r} but no {prefix}.{path}.bias")
            weight = np.ascontiguousarray(weights[name].T, dtype=np.float32)
            layers.append((order, weight, bias.astype(np.float32)))
    return [(weight, bias) for _, weight, bias in sorted(layers, key=lambda layer: layer[0])]


def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, 0.0, out=x if out is None else out)


ACTIVATIONS = {"tanh": np.tanh, "relu": _relu}
"""Activation name -> an in-place-capable numpy function (the torch model's)."""


def mlp(x: np.ndarray, layers: Layers, activate=np.tanh) -> np.ndarray:
    """Linear layers with ``activate`` between them (none after the last)."""
    for i, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        if i < len(layers) - 1:
            activate(x, out=x)
    return x
