"""A probabilistic ensemble of dynamics models (PETS, Chua et al. 2018, arXiv:1805.12114).

Each member is an MLP from a normalised ``(observation, action)`` to a Gaussian over the
normalised ``(observation delta, reward)`` (mean and log-variance) and a termination
logit. Members train on their own bootstrap of the transitions with the Gaussian
negative log-likelihood (and a binary cross-entropy for termination)::

    ensemble = DynamicsEnsemble(observation_space, action_space, EnsembleSpec(obs_dim=3, act_dim=1))
    losses = ensemble.fit(transitions, updates=200, batch_size=256, rng=rng)
    params = ensemble.params()                 # numpy: weights and normalisers, to ship to tasks
    next_obs, reward, done = predict(params, obs, act, members, noise)

The reward is learned, not computed from the observation: the model knows nothing of the
env but its transitions. The forward pass is one batched matmul per layer over all
members (weights ``(E, in, out)``), the same function in training and in planning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from hrl_tasks.policies.torch_utils import tree_to_numpy, tree_to_torch

MIN_STD = 1e-6  # a feature with a smaller deviation (e.g. an action never taken) is not scaled


@dataclass(frozen=True)
class EnsembleSpec:
    """The shape of an ensemble: sizes of its inputs, outputs and layers.

    Attributes:
        obs_dim: Length of the (flat) observation.
        act_dim: Length of the action input (``n`` for a one-hot ``Discrete(n)``).
        discrete: Whether actions are indices, one-hot encoded on input.
        ensemble_size: Members.
        hidden: Hidden widths of each member.
    """

    obs_dim: int
    act_dim: int
    discrete: bool = False
    ensemble_size: int = 5
    hidden: tuple[int, ...] = (200, 200)

    @property
    def in_dim(self) -> int:
        return self.obs_dim + self.act_dim

    @property
    def out_dim(self) -> int:
        """Gaussian outputs: the observation delta and the reward."""
        return self.obs_dim + 1

    @classmethod
    def of(cls, observation_space, action_space, ensemble_size: int, hidden) -> EnsembleSpec:
        """The spec for an env's spaces (a flat Box of observations; Box or Discrete actions).

        Raises:
            ValueError: for other spaces.
        """
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(f"mpc needs a flat Box observation space, got {observation_space}")
        if isinstance(action_space, spaces.Discrete):
            act_dim, discrete = int(action_space.n), True
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            act_dim, discrete = int(action_space.shape[0]), False
        else:
            raise ValueError(f"mpc needs a flat Box or a Discrete action space, got {action_space}")
        obs_dim = int(observation_space.shape[0])
        return cls(obs_dim, act_dim, discrete, ensemble_size, tuple(hidden))


def forward(params: dict[str, torch.Tensor], x: torch.Tensor, layers: int):
    """All members at once: ``x`` ``(E, N, in)`` normalised -> ``(mean, logvar, done_logit)``.

    ``mean`` and ``logvar`` are ``(E, N, out_dim)`` in normalised units; the log-variance
    is soft-bounded by the learned ``max_logvar`` and ``min_logvar`` (PETS appendix A.1).
    """
    h = x
    for i in range(layers):
        h = torch.baddbmm(params[f"b{i}"], h, params[f"w{i}"])
        if i < layers - 1:
            h = F.silu(h)
    out_dim = params["max_logvar"].shape[-1]
    mean, logvar, done_logit = h[..., :out_dim], h[..., out_dim:-1], h[..., -1]
    logvar = params["max_logvar"] - F.softplus(params["max_logvar"] - logvar)
    logvar = params["min_logvar"] + F.softplus(logvar - params["min_logvar"])
    return mean, logvar, done_logit


class EnsembleNet(nn.Module):
    """The parameters: ``w{i}`` ``(E, in, out)``, ``b{i}`` ``(E, 1, out)``, log-variance bounds."""

    def __init__(self, spec: EnsembleSpec):
        super().__init__()
        sizes = [spec.in_dim, *spec.hidden, 2 * spec.out_dim + 1]
        self.layers = len(sizes) - 1
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            bound = 1.0 / np.sqrt(fan_in)  # torch's Linear initialisation, per member
            w = torch.empty(spec.ensemble_size, fan_in, fan_out).uniform_(-bound, bound)
            b = torch.empty(spec.ensemble_size, 1, fan_out).uniform_(-bound, bound)
            self.register_parameter(f"w{i}", nn.Parameter(w))
            self.register_parameter(f"b{i}", nn.Parameter(b))
        self.max_logvar = nn.Parameter(torch.full((spec.out_dim,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((spec.out_dim,), -10.0))

    def forward(self, x: torch.Tensor):
        return forward(dict(self.named_parameters()), x, self.layers)


@dataclass
class Normalizer:
    """Mean and standard deviation of the inputs and of the Gaussian targets."""

    input_mean: np.ndarray
    input_std: np.ndarray
    target_mean: np.ndarray
    target_std: np.ndarray

    @classmethod
    def identity(cls, spec: EnsembleSpec) -> Normalizer:
        zeros_in, zeros_out = np.zeros(spec.in_dim, np.float32), np.zeros(spec.out_dim, np.float32)
        return cls(zeros_in, zeros_in + 1, zeros_out, zeros_out + 1)

    @classmethod
    def fit(cls, inputs: np.ndarray, targets: np.ndarray) -> Normalizer:
        def stats(x):
            mean, std = x.mean(0), x.std(0)
            return mean.astype(np.float32), np.where(std < MIN_STD, 1.0, std).astype(np.float32)

        return cls(*stats(inputs), *stats(targets))

    def state(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, np.float32) for k, v in vars(self).items()}


class DynamicsEnsemble:
    """The learned model of an env: an `EnsembleNet`, its normaliser and its optimizer.

    Args:
        observation_space: The env's (flat Box) observation space.
        action_space: Its Box or Discrete action space.
        spec: Sizes; see `EnsembleSpec.of`.
        lr: AdamW's learning rate.
        weight_decay: AdamW's decoupled weight decay, on the layers' weights only.
    """

    def __init__(
        self, observation_space, action_space, spec: EnsembleSpec, lr=1e-3, weight_decay=0.0
    ):
        self.observation_space, self.action_space, self.spec = observation_space, action_space, spec
        self.net = EnsembleNet(spec)
        self.normalizer = Normalizer.identity(spec)
        named = dict(self.net.named_parameters())
        decayed = [v for k, v in named.items() if k.startswith("w")]
        groups = [
            {"params": decayed, "weight_decay": weight_decay},
            {"params": [v for k, v in named.items() if not k.startswith("w")], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=lr)

    def inputs(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(N, in_dim)`` float32 rows of observation and (one-hot) action."""
        return np.concatenate([obs, encode_actions(self.spec, actions)], axis=-1, dtype=np.float32)

    @staticmethod
    def targets(obs, rewards, next_obs) -> np.ndarray:
        """``(N, obs_dim + 1)`` float32: the observation delta, then the reward."""
        return np.concatenate([next_obs - obs, np.reshape(rewards, (-1, 1))], -1, dtype=np.float32)

    def fit(self, data: dict[str, np.ndarray], updates: int, batch_size: int, rng) -> dict:
        """Refit the normaliser to ``data``, then ``updates`` Adam steps on bootstraps of it.

        Args:
            data: ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds`` arrays.
            updates: Gradient steps.
            batch_size: Rows per member and step.
            rng: A numpy Generator: the bootstraps and minibatches.

        Returns:
            The mean ``nll`` (Gaussian, normalised units), ``mse`` (of the normalised
            mean) and ``termination_loss`` over the steps; empty if there were none.
        """
        x = self.inputs(data["obs"], data["actions"])
        y = self.targets(data["obs"], data["rewards"], data["next_obs"])
        self.normalizer = Normalizer.fit(x, y)
        n, members = len(x), self.spec.ensemble_size
        if updates == 0 or n == 0:
            return {}
        norm = self.normalizer
        x = torch.from_numpy((x - norm.input_mean) / norm.input_std)
        y = torch.from_numpy((y - norm.target_mean) / norm.target_std)
        done = torch.as_tensor(data["terminateds"], dtype=torch.float32)
        bootstraps = rng.integers(n, size=(members, n))  # each member's own resample
        totals = np.zeros(3)
        for _ in range(updates):
            picks = rng.integers(n, size=(members, min(batch_size, n)))
            rows = torch.from_numpy(np.take_along_axis(bootstraps, picks, axis=1))
            mean, logvar, done_logit = self.net(x[rows])
            nll = (((mean - y[rows]) ** 2) * torch.exp(-logvar) + logvar).sum(-1).mean()
            termination = F.binary_cross_entropy_with_logits(done_logit, done[rows])
            bounds = 0.01 * (self.net.max_logvar.sum() - self.net.min_logvar.sum())
            self.optimizer.zero_grad()
            (nll + termination + bounds).backward()
            self.optimizer.step()
            mse = ((mean.detach() - y[rows]) ** 2).mean()
            totals += [nll.item(), mse.item(), termination.item()]
        names = ("nll", "mse", "termination_loss")
        return {name: float(total) / updates for name, total in zip(names, totals, strict=True)}

    def prediction_error(self, data: dict[str, np.ndarray]) -> float:
        """Mean squared error of the ensemble's mean prediction of ``(next_obs, reward)``,
        in the env's units (for transitions it was not trained on)."""
        params = self.params()
        members = np.arange(len(data["obs"])) % self.spec.ensemble_size
        next_obs, rewards, _ = predict(params, data["obs"], data["actions"], members, None)
        error = np.concatenate(
            [next_obs - data["next_obs"], (rewards - data["rewards"])[:, None]], axis=-1
        )
        return float(np.mean(error**2))

    def params(self) -> dict[str, np.ndarray]:
        """What `predict` needs, as numpy: the weights, the normaliser and the spec's sizes."""
        return {**self.get_weights(), **self.normalizer.state(), **spec_arrays(self.spec)}

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.net.named_parameters()}

    def get_state(self) -> dict:
        return {
            "weights": self.get_weights(),
            "normalizer": self.normalizer.state(),
            "optimizer": tree_to_numpy(self.optimizer.state_dict()),
        }

    def set_state(self, state: dict, optimizer: bool = True) -> None:
        """Loads weights and normaliser (and the optimizer's state); raises KeyError,
        RuntimeError or ValueError if they do not fit this ensemble's spec."""
        weights = {k: torch.from_numpy(np.array(v)) for k, v in state["weights"].items()}
        normalizer = Normalizer(**{k: np.array(v) for k, v in state["normalizer"].items()})
        if normalizer.input_mean.shape != (self.spec.in_dim,):
            raise ValueError(
                f"normaliser of {normalizer.input_mean.shape} inputs, not {self.spec.in_dim}"
            )
        self.net.load_state_dict(weights)
        self.normalizer = normalizer
        if optimizer and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(tree_to_torch(state["optimizer"]))


def spec_arrays(spec: EnsembleSpec) -> dict[str, np.ndarray]:
    """The sizes `predict` reads from ``params``."""
    return {
        "layers": np.array(len(spec.hidden) + 1),
        "discrete": np.array(spec.discrete),
        "act_dim": np.array(spec.act_dim),
    }


def encode_actions(spec_or_params, actions: np.ndarray) -> np.ndarray:
    """Actions as model inputs: one-hot rows for discrete actions, float32 rows otherwise."""
    if isinstance(spec_or_params, EnsembleSpec):
        discrete, act_dim = spec_or_params.discrete, spec_or_params.act_dim
    else:
        discrete, act_dim = bool(spec_or_params["discrete"]), int(spec_or_params["act_dim"])
    actions = np.asarray(actions)
    if discrete:
        return np.eye(act_dim, dtype=np.float32)[actions.reshape(-1).astype(np.int64)]
    return actions.reshape(len(actions), act_dim).astype(np.float32)


def as_tensors(params: dict) -> dict[str, torch.Tensor]:
    """`DynamicsEnsemble.params` as tensors (read-only arrays, as the codec gives, are copied)."""
    tensors = {}
    for key, value in params.items():
        if not isinstance(value, torch.Tensor):
            value = np.asarray(value)
            value = torch.from_numpy(value if value.flags.writeable else value.copy())
        tensors[key] = value
    return tensors


def predict(params: dict, obs, actions, members, noise=None):
    """`step` on numpy arrays: ``actions`` as the env takes them (indices if discrete),
    ``members`` and ``noise`` as for `step`; returns numpy arrays."""
    params = as_tensors(params)
    obs = torch.from_numpy(np.asarray(obs, np.float32))
    actions = torch.from_numpy(encode_actions(params, actions))
    members = torch.from_numpy(np.asarray(members, np.int64))
    noise = None if noise is None else torch.from_numpy(np.asarray(noise, np.float32))
    next_obs, reward, terminated = step(params, obs, actions, members, noise)
    return next_obs.numpy(), reward.numpy(), terminated.numpy()


@torch.no_grad()
def step(params: dict, obs, actions, members, noise):
    """One model step for each row, each row through its own member.

    Args:
        params: `DynamicsEnsemble.params`, through `as_tensors`.
        obs: ``(N, obs_dim)`` observations.
        actions: ``(N, act_dim)`` actions as model inputs (see `encode_actions`).
        members: ``(N,)`` int64: the member each row goes through.
        noise: ``(N, obs_dim)`` standard normal draws for the sampled observation delta,
            or None for the mean. The reward is the predicted mean.

    Returns:
        ``(next_obs (N, obs_dim), reward (N,), terminated (N,) bool)`` tensors.
    """
    x = (torch.cat([obs, actions], -1) - params["input_mean"]) / params["input_std"]
    padded, slots = _by_member(x, members, params["w0"].shape[0])
    mean, logvar, done_logit = forward(params, padded, int(params["layers"]))
    mean, logvar = mean[members, slots], logvar[members, slots]
    if noise is not None:
        obs_dim = obs.shape[-1]
        scale = torch.exp(0.5 * logvar[:, :obs_dim])
        mean = torch.cat([mean[:, :obs_dim] + scale * noise, mean[:, obs_dim:]], -1)
    out = mean * params["target_std"] + params["target_mean"]
    return obs + out[:, :-1], out[:, -1], done_logit[members, slots] > 0


def _by_member(x: torch.Tensor, members: torch.Tensor, ensemble_size: int):
    """Rows grouped by member into ``(E, max rows of a member, in)`` (zero-padded), and
    each row's slot in its member's group."""
    order = torch.argsort(members, stable=True)
    counts = torch.bincount(members, minlength=ensemble_size)
    starts = torch.cumsum(counts, 0) - counts
    slots = torch.empty_like(members)
    slots[order] = torch.arange(len(members)) - starts[members[order]]
    padded = x.new_zeros(ensemble_size, int(counts.max()) if len(members) else 0, x.shape[-1])
    padded[members, slots] = x
    return padded, slots
