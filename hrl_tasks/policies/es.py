"""Evolution strategies (Salimans et al. 2017, https://arxiv.org/abs/1703.03864).

Workers evaluate antithetic perturbations ``theta +- sigma * eps_i`` of the
flat parameters, with ``eps_i = policy.noise(seed_i)``, and report one row per
pair. The policy turns the rows into the ES gradient estimate with centered
rank fitness shaping and takes an Adam step with L2 decay, as OpenAI's
evolution-strategies-starter (``es.py``, ``optimizers.py``). No backpropagation
through the network is involved.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.configs import ESPolicyConfig, renamed
from hrl_tasks.policies.distributions import make_action_dist
from hrl_tasks.policies.models import MLP, make_encoder
from hrl_tasks.policies.torch_policy import TorchPolicy

NOISE_SEEDS = "noise_seeds"
"""ES batch column: int seed of each perturbation, ``[n]``."""
RETURNS = "returns"
"""ES batch column: ``[n, 2]`` returns at ``theta + sigma eps`` and ``theta - sigma eps``."""


def centered_ranks(x: ArrayLike) -> np.ndarray:
    """Ranks of all entries of `x` scaled to [-0.5, 0.5] (ties broken by position).

    Args:
        x: Returns of any shape with at least two entries.

    Returns:
        float32 array shaped like `x`.

    Raises:
        ValueError: If `x` has fewer than two entries.
    """
    x = np.asarray(x)
    if x.size < 2:
        raise ValueError(f"centered_ranks needs at least two values, got {x.size}")
    ranks = np.empty(x.size, np.float32)
    ranks[np.argsort(x.ravel(), kind="stable")] = np.arange(x.size, dtype=np.float32)
    return (ranks / (x.size - 1) - 0.5).reshape(x.shape)


class ESPolicy(TorchPolicy):
    """A deterministic policy whose flat parameters are searched by evolution strategies.

    `compute_actions` is deterministic whatever `explore` says (exploration is
    in parameter space): the argmax for Discrete actions, the network output
    (unclipped) for Box actions. `loss` reads ``noise_seeds`` and ``returns``
    (one row per antithetic pair) and is the linear surrogate
    ``-<g, theta> + l2_coeff / 2 * |theta|^2`` with
    ``g = sum_i (rank+_i - rank-_i) eps_i / (2n)``, so its gradient is
    OpenAI's update direction; its value is not a fitness.

    Usage::

        theta = policy.get_flat()                          # driver broadcasts theta
        for seed in seeds:                                  # on workers
            for sign in (1, -1):
                policy.set_flat(theta + sign * sigma * policy.noise(seed))
                ... run episodes with policy.compute_actions(obs) ...
        info = policy.learn_on_batch(SampleBatch({"noise_seeds": seeds, "returns": returns}))

    Args:
        observation_space: A Box space.
        action_space: Discrete or 1-D Box.
        config: An `ESPolicyConfig`; None uses the defaults.
    """

    config_class = ESPolicyConfig

    def make_model(self) -> nn.Module:
        encoder, feature_dim = make_encoder(self.observation_space)
        n_out = make_action_dist(self.action_space).num_inputs
        return nn.Sequential(
            encoder, MLP(feature_dim, n_out, self.config.hidden, nn.Tanh, output_gain=0.01)
        )

    @torch.no_grad()
    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Deterministic actions; returns ``(actions, {})``."""
        out = self.model(self.obs_tensor(obs))
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        return self.to_actions(out.argmax(dim=-1) if discrete else out), {}

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return sum(p.numel() for p in self.model.parameters())

    def get_flat(self) -> np.ndarray:
        """All parameters as one float32 vector (a copy)."""
        return nn.utils.parameters_to_vector(self.model.parameters()).detach().numpy().copy()

    def set_flat(self, flat: ArrayLike) -> None:
        """Loads a vector from `get_flat` (or a perturbation of it).

        Raises:
            ValueError: If its length is not `num_params`.
        """
        flat = np.asarray(flat, np.float32)
        if flat.shape != (self.num_params,):
            raise ValueError(f"expected a flat vector of {self.num_params}, got shape {flat.shape}")
        with torch.no_grad():
            nn.utils.vector_to_parameters(torch.from_numpy(flat.copy()), self.model.parameters())

    def noise(self, seed: int) -> np.ndarray:
        """The standard normal perturbation ``eps`` of `seed`, float32 ``[num_params]``."""
        return np.random.default_rng(int(seed)).standard_normal(self.num_params, np.float32)

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """Terms ``loss_es`` and ``loss_l2``; diagnostics ``return_mean`` and ``return_max``.

        Raises:
            KeyError: If a column is missing.
            ValueError: If ``returns`` is not ``[n, 2]``.
        """
        seeds = self.column(batch, NOISE_SEEDS, np.int64).numpy()
        returns = self.column(batch, RETURNS, np.float64).numpy()
        if returns.ndim != 2 or returns.shape[1] != 2:
            raise ValueError(
                f"column {RETURNS!r} must be [n, 2] antithetic pairs, got {returns.shape}"
            )
        ranks = centered_ranks(returns)
        weights = ranks[:, 0] - ranks[:, 1]
        direction = np.zeros(self.num_params, np.float32)
        for seed, weight in zip(seeds, weights, strict=True):
            direction += weight * self.noise(seed)
        direction /= returns.size
        flat = nn.utils.parameters_to_vector(self.model.parameters())
        terms = {
            "loss_es": -(torch.from_numpy(direction) @ flat),
            "loss_l2": 0.5 * self.config.l2_coeff * (flat @ flat),
        }
        return {
            **terms,
            "total": sum(terms.values()),
            "return_mean": torch.tensor(float(returns.mean())),
            "return_max": torch.tensor(float(returns.max())),
        }


def __getattr__(name: str):  # the config's old name, ESConfig
    return renamed(__name__, name, ("ESConfig",))
