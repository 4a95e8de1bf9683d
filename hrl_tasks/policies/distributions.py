"""Action distributions over torch tensors, and the heads that build them from model outputs.

A distribution holds a batch of per-sample distributions; all methods work over
any leading batch shape (``[B]``, ``[T, B]``, ...). `sample` takes an optional
`torch.Generator` so that a policy can own its randomness and save it with its
state::

    head = make_action_dist(action_space)      # an nn.Module; DiagGaussian's owns log_std
    dist = head(model_outputs)                 # Categorical or DiagGaussian
    actions = dist.sample(generator)
    logp, entropy = dist.logp(actions), dist.entropy()
"""

from __future__ import annotations

import abc
import math

import gymnasium as gym
import torch
from torch import nn

from hrl_tasks.policies.spaces import UnsupportedSpaceError

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class ActionDistribution(abc.ABC):
    """A batch of action distributions (abstract)."""

    @abc.abstractmethod
    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draws one action per batch entry (no gradient).

        Args:
            generator: Source of randomness; None uses torch's global generator.

        Returns:
            Actions, shaped ``batch_shape`` (discrete) or ``batch_shape + [d]``.
        """

    @abc.abstractmethod
    def deterministic(self) -> torch.Tensor:
        """Returns the most likely action (the mode) per batch entry."""

    @abc.abstractmethod
    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability (or density) of `actions`, shaped ``batch_shape``."""

    @abc.abstractmethod
    def entropy(self) -> torch.Tensor:
        """Entropy per batch entry, shaped ``batch_shape``."""

    @abc.abstractmethod
    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """``KL(self || other)`` per batch entry, shaped ``batch_shape``."""


class Categorical(ActionDistribution):
    """A categorical distribution over ``n`` actions given unnormalized logits.

    Args:
        logits: Shape ``batch_shape + [n]``.
    """

    def __init__(self, logits: torch.Tensor) -> None:
        # Clamp -inf to the lowest finite value so that 0 * log(0) terms stay 0.
        logits = torch.clamp(logits, min=torch.finfo(logits.dtype).min)
        self.log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)

    @property
    def probs(self) -> torch.Tensor:
        """Probabilities, shaped like the logits."""
        return self.log_probs.exp()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        probs = self.probs.detach()
        flat = probs.reshape(-1, probs.shape[-1])
        drawn = torch.multinomial(flat, 1, generator=generator)
        return drawn.reshape(probs.shape[:-1])

    def deterministic(self) -> torch.Tensor:
        return self.log_probs.argmax(dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        index = actions.long().unsqueeze(-1)
        return self.log_probs.gather(-1, index).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.probs * self.log_probs).sum(dim=-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        _check_same_kind(self, other)
        return (self.probs * (self.log_probs - other.log_probs)).sum(dim=-1)


class DiagGaussian(ActionDistribution):
    """A Gaussian with diagonal covariance over ``d``-dimensional actions.

    Args:
        mean: Shape ``batch_shape + [d]``.
        log_std: Log standard deviations, broadcastable to `mean` (typically a
            state-independent parameter of shape ``[d]``).
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    @property
    def std(self) -> torch.Tensor:
        """Standard deviations, shaped like the mean."""
        return self.log_std.exp()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(
            self.mean.shape, generator=generator, dtype=self.mean.dtype, device=self.mean.device
        )
        return (self.mean + self.std * noise).detach()

    def deterministic(self) -> torch.Tensor:
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z**2 - self.log_std - _HALF_LOG_2PI).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum(dim=-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        _check_same_kind(self, other)
        var_ratio = torch.exp(2.0 * (self.log_std - other.log_std))
        mean_term = ((self.mean - other.mean) / other.std) ** 2
        return 0.5 * (var_ratio + mean_term - 1.0).sum(dim=-1) - (self.log_std - other.log_std).sum(
            dim=-1
        )


class CategoricalHead(nn.Module):
    """Turns ``n`` logits into a `Categorical` (no parameters).

    Args:
        n: Number of actions.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.num_inputs = n

    def forward(self, logits: torch.Tensor) -> Categorical:
        return Categorical(logits)


class DiagGaussianHead(nn.Module):
    """Turns ``d`` means into a `DiagGaussian` with a state-independent log-std parameter.

    Args:
        dim: Action dimension ``d``.
        init_log_std: Initial value of every log standard deviation.
    """

    def __init__(self, dim: int, init_log_std: float = 0.0) -> None:
        super().__init__()
        self.num_inputs = dim
        self.log_std = nn.Parameter(torch.full((dim,), float(init_log_std)))

    def forward(self, mean: torch.Tensor) -> DiagGaussian:
        return DiagGaussian(mean, self.log_std)


def make_action_dist(
    action_space: gym.Space, init_log_std: float = 0.0
) -> CategoricalHead | DiagGaussianHead:
    """Returns the head that builds the action distribution for `action_space`.

    ``Discrete(n)`` gives a `CategoricalHead` (``n`` inputs, a `Categorical`);
    a 1-D ``Box(d,)`` gives a `DiagGaussianHead` (``d`` inputs, a `DiagGaussian`
    with a learned state-independent log-std). Gaussian samples are not
    clipped to the Box bounds: the env runner clips, and logp is of the sample.

    Args:
        action_space: A gymnasium action space.
        init_log_std: Initial log-std of a Gaussian head.

    Returns:
        An ``nn.Module`` with a ``num_inputs`` attribute.

    Raises:
        TypeError: If the space is neither Discrete nor Box.
        ValueError: If a Discrete space has a nonzero ``start`` or a Box is not 1-D.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(f"Discrete action spaces must start at 0, got {action_space!r}")
        return CategoricalHead(int(action_space.n))
    if isinstance(action_space, gym.spaces.Box):
        if len(action_space.shape) != 1:
            raise ValueError(
                f"a Box action space must be 1-D for DiagGaussian, got shape {action_space.shape}"
            )
        return DiagGaussianHead(action_space.shape[0], init_log_std)
    raise UnsupportedSpaceError(
        f"unsupported action space {action_space!r}; supported: gymnasium.spaces.Discrete "
        "(-> Categorical) and 1-D gymnasium.spaces.Box (-> DiagGaussian)"
    )


def _check_same_kind(dist: ActionDistribution, other: ActionDistribution) -> None:
    if type(other) is not type(dist):
        raise TypeError(f"kl needs two {type(dist).__name__}s, got {type(other).__name__}")
