"""Torch networks for the policies: MLP, a Nature-DQN CNN, actor-critic and Q networks.

All modules accept any leading batch shape (``[B, ...]``, ``[T, B, ...]``).
Weights use orthogonal initialization with zero biases as in CleanRL
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo.py, ``layer_init``;
Andrychowicz et al. 2021, https://arxiv.org/abs/2006.05990): gain ``sqrt(2)``
for hidden layers, 0.01 for policy logits and 1 for value outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hrl_tasks.policies.distributions import ActionDistribution
from hrl_tasks.policies.spaces import MASKED, PlanesBox, UnsupportedSpaceError

HIDDEN_GAIN = math.sqrt(2.0)


def layer_init(layer: nn.Linear | nn.Conv2d, gain: float = HIDDEN_GAIN) -> nn.Module:
    """Orthogonal weights with `gain` and zero biases, in place.

    Args:
        layer: A linear or convolution layer.
        gain: Scale of the orthogonal matrix.

    Returns:
        The same layer.
    """
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Sequential):
    """Fully connected layers with an activation between them (none after the last).

    Args:
        in_dim: Input features.
        out_dim: Output features.
        hidden: Widths of the hidden layers; ``()`` gives a single linear layer.
        activation: Factory of the activation module, e.g. ``nn.Tanh``.
        output_gain: Orthogonal-init gain of the output layer.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: Callable[[], nn.Module] = nn.Tanh,
        output_gain: float = 1.0,
    ) -> None:
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [layer_init(nn.Linear(width, h)), activation()]
            width = h
        layers.append(layer_init(nn.Linear(width, out_dim), output_gain))
        super().__init__(*layers)


class CNN(nn.Module):
    """The Nature-DQN conv stack (Mnih et al. 2015) with a linear layer on top.

    Conv 32x8x8 stride 4, conv 64x4x4 stride 2, conv 64x3x3 stride 1, then a
    linear layer to `out_dim`, each followed by ReLU. Input is channel-last
    ``[..., H, W, C]`` or, with ``channels_first``, ``[..., C, H, W]`` (stacked
    Atari frames, see `hrl_tasks.envs.atari`), with values in 0..255 (e.g.
    uint8), scaled to [0, 1] here: batches carry the bytes, not floats.
    Images must be at least 36x36.

    Args:
        obs_shape: ``(H, W, C)``, or ``(C, H, W)`` with ``channels_first``.
        out_dim: Output features.
        channels_first: The channel axis is the first one.
    """

    def __init__(
        self, obs_shape: Sequence[int], out_dim: int = 512, channels_first: bool = False
    ) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"CNN needs (H, W, C) observations, got shape {tuple(obs_shape)}")
        if channels_first:
            channels, height, width = obs_shape
        else:
            height, width, channels = obs_shape
        self.obs_shape = tuple(obs_shape)
        self.channels_first = channels_first
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.fc = nn.Sequential(layer_init(nn.Linear(n_flat, out_dim)), nn.ReLU())
        self.out_dim = out_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *self.obs_shape)
        if not self.channels_first:
            x = x.permute(0, 3, 1, 2)
        x = x.float() / 255.0
        return self.fc(self.convs(x)).reshape(*lead, self.out_dim)


class SmallCNN(nn.Module):
    """The network of the MinAtar paper's DQN (Young and Tian 2019), before its hidden
    layer: one conv 16x3x3 stride 1 and a ReLU on channels-first planes ``[..., C, H,
    W]`` of 0 and 1 (`hrl_tasks.envs.minatar`), flattened (16 x 8 x 8 = 1,024 features
    for 10x10).

    Args:
        obs_shape: ``(C, H, W)``.
        filters: Conv filters.
    """

    def __init__(self, obs_shape: Sequence[int], filters: int = 16) -> None:
        super().__init__()
        channels, height, width = obs_shape
        self.obs_shape = tuple(obs_shape)
        self.conv = nn.Sequential(layer_init(nn.Conv2d(channels, filters, 3)), nn.ReLU())
        self.out_dim = filters * (height - 2) * (width - 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *self.obs_shape).float()
        return self.conv(x).reshape(*lead, self.out_dim)


def make_encoder(observation_space: gym.Space) -> tuple[nn.Module, int]:
    """The feature extractor for an observation space.

    A `PlanesBox` (MinAtar's ``(C, 10, 10)`` planes) gets a `SmallCNN`; a uint8 3-D Box a
    `CNN` (512 features): channels first when the first axis is the shortest (``(4, 84,
    84)``, stacked Atari frames), else channels last (``(H, W, C)``); any other Box is
    flattened over its own dimensions.

    Args:
        observation_space: A gymnasium observation space.

    Returns:
        ``(encoder, feature_dim)``.

    Raises:
        TypeError: If the space is not a Box.
    """
    if not isinstance(observation_space, gym.spaces.Box):
        raise UnsupportedSpaceError(
            f"unsupported observation space {observation_space!r}; supported: gymnasium.spaces.Box"
        )
    shape = observation_space.shape
    if isinstance(observation_space, PlanesBox):
        small = SmallCNN(shape)
        return small, small.out_dim
    if len(shape) == 3 and observation_space.dtype == np.uint8:
        cnn = CNN(shape, channels_first=shape[0] < min(shape[1:]))
        return cnn, cnn.out_dim
    return nn.Flatten(start_dim=-len(shape)), int(np.prod(shape))


class ObsNormalizer(nn.Module):
    """Observations standardized by running statistics and clipped, as Stable-Baselines3's
    ``VecNormalize``: ``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)``.

    ``mean``, ``var`` and ``count`` are buffers: they travel with the weights to the
    rollout workers, and are saved in checkpoints. `update` merges statistics
    gathered by the workers (`hrl_tasks.data.running_stats.RunningStats`).
    """

    def __init__(self, shape: Sequence[int], clip: float = 10.0) -> None:
        super().__init__()
        self.clip = float(clip)
        self.register_buffer("mean", torch.zeros(tuple(shape)))
        self.register_buffer("var", torch.ones(tuple(shape)))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scaled = (obs.float() - self.mean) / torch.sqrt(self.var + 1e-8)
        return scaled.clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, stats) -> None:
        """Merges ``stats`` (a `RunningStats`) into the running statistics."""
        from hrl_tasks.data.running_stats import RunningStats

        count = float(self.count)
        mine = RunningStats(count, self.mean.double().numpy(), (self.var.double() * count).numpy())
        merged = mine.merge(stats)
        self.mean.copy_(torch.from_numpy(merged.mean))
        self.var.copy_(torch.from_numpy(merged.var))
        self.count.fill_(merged.count)


class ActorCritic(nn.Module):
    """An encoder, then an actor and a critic, with separate or shared MLP trunks.

    Separate trunks (the default, as CleanRL's PPO) are two MLPs on the
    encoder's features; a shared trunk is one MLP with two linear heads.

    Args:
        encoder: Maps observations to ``feature_dim`` features (see `make_encoder`).
        feature_dim: Width of the encoder output.
        dist_head: Maps ``dist_head.num_inputs`` actor outputs to an
            `ActionDistribution` (see `distributions.make_action_dist`).
        hidden: Hidden widths after the encoder; ``()`` gives linear heads.
        activation: Activation factory.
        shared: Share the hidden layers between actor and critic.
        mask_size: The observation's last ``mask_size`` entries are an action
            mask (see `hrl_tasks.policies.policy_map.MaskedBox`): illegal actions'
            logits become `MASKED`, so they get no probability. 0: no mask.
        actor_inputs: The actor sees only the first ``actor_inputs`` features
            (an agent's own observation, with a centralized critic that sees them
            all; see `hrl_tasks.policies.spaces.StateBox`). 0: all of them.
        obs_normalizer: Applied to observations before the encoder (an
            `ObsNormalizer`); None: observations as they are.
    """

    def __init__(
        self,
        encoder: nn.Module,
        feature_dim: int,
        dist_head: nn.Module,
        hidden: Sequence[int] = (64, 64),
        activation: Callable[[], nn.Module] = nn.Tanh,
        shared: bool = False,
        mask_size: int = 0,
        actor_inputs: int = 0,
        obs_normalizer: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.obs_normalizer = obs_normalizer or nn.Identity()
        self.encoder = encoder
        self.mask_size = int(mask_size)
        self.actor_inputs = int(actor_inputs)
        if self.actor_inputs and shared:
            raise ValueError("a centralized critic needs separate trunks: shared_trunk=False")
        self.dist_head = dist_head
        n_out = dist_head.num_inputs
        if shared and hidden:
            self.trunk: nn.Module = nn.Sequential(
                MLP(feature_dim, hidden[-1], hidden[:-1], activation, HIDDEN_GAIN), activation()
            )
            feature_dim, hidden = hidden[-1], ()
        else:
            self.trunk = nn.Identity()
        actor_dim = self.actor_inputs or feature_dim
        self.actor = MLP(actor_dim, n_out, hidden, activation, output_gain=0.01)
        self.critic = MLP(feature_dim, 1, hidden, activation, output_gain=1.0)

    def forward(self, obs: torch.Tensor) -> tuple[ActionDistribution, torch.Tensor]:
        """Returns the action distribution and the values ``V(obs)`` (shape ``obs.shape[:-k]``)."""
        features = self.trunk(self.encoder(self.obs_normalizer(obs)))
        own = features[..., : self.actor_inputs] if self.actor_inputs else features
        logits = apply_mask(self.actor(own), obs, self.mask_size)
        return self.dist_head(logits), self.critic(features).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Returns ``V(obs)`` only."""
        return self.critic(self.trunk(self.encoder(self.obs_normalizer(obs)))).squeeze(-1)


class NoisyLinear(nn.Module):
    """A linear layer with learned, factorized Gaussian noise on its weights (Fortunato
    et al. 2018, https://arxiv.org/abs/1706.10295, section 3.2): ``y = (mu_w + sigma_w *
    eps_w) x + mu_b + sigma_b * eps_b`` with ``eps_w = f(eps_out) f(eps_in)^T``,
    ``f(x) = sign(x) sqrt(|x|)``, the means uniform in ``+-1/sqrt(in)`` and the sigmas
    ``sigma0 / sqrt(in)`` at the start, as in the paper.

    The noise is drawn afresh at each forward pass while ``noisy`` is True (from
    ``generator``, when set), and left out when it is False (the means alone: greedy
    evaluation). Exploration then comes from the weights, with no epsilon.
    """

    def __init__(self, in_dim: int, out_dim: int, sigma0: float = 0.5) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight_mu = nn.Parameter(torch.empty(out_dim, in_dim).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_dim, in_dim), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_dim).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_dim,), sigma0 * bound))
        self.noisy = True
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.noisy:
            return F.linear(x, self.weight_mu, self.bias_mu)
        out_dim, in_dim = self.weight_mu.shape
        eps_in = _scaled_noise(in_dim, self.generator)
        eps_out = _scaled_noise(out_dim, self.generator)
        weight = self.weight_mu + self.weight_sigma * torch.outer(eps_out, eps_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * eps_out)


def _scaled_noise(size: int, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.randn(size, generator=generator)
    return noise.sign() * noise.abs().sqrt()


def set_noise(module: nn.Module, noisy: bool, generator: torch.Generator | None = None) -> None:
    """Turn the noise of every `NoisyLinear` in ``module`` on or off (and give it
    ``generator`` to draw from, when one is given)."""
    for layer in module.modules():
        if isinstance(layer, NoisyLinear):
            layer.noisy = noisy
            if generator is not None:
                layer.generator = generator


class QNetwork(nn.Module):
    """Q-values for discrete actions, optionally with a dueling head, a distribution
    over returns per action (C51) and noisy layers: DQN's network and Rainbow's.

    Dueling (Wang et al. 2016, https://arxiv.org/abs/1511.06581, eq. 9):
    ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``. Distributional (Bellemare et al.
    2017, https://arxiv.org/abs/1707.06887): with ``num_atoms > 1`` the heads give
    ``num_atoms`` logits per action over the evenly spaced returns ``support`` from
    ``v_min`` to ``v_max`` (dueling adds V's logits to A's, less their mean over
    actions, as in Rainbow, Hessel et al. 2018), and ``Q(s, a)`` is the mean of that
    distribution. ``noisy``: every layer after the encoder is a `NoisyLinear`.

    Args:
        encoder: Maps observations to ``feature_dim`` features.
        feature_dim: Width of the encoder output.
        num_actions: Number of discrete actions.
        hidden: Hidden widths of the shared trunk.
        activation: Activation factory.
        dueling: Use separate value and advantage heads.
        mask_size: As for `ActorCritic`: illegal actions' Q-values become `MASKED`.
        num_atoms: Atoms of the return distribution; 1 is the scalar Q of DQN.
        v_min: The lowest return of the support (``num_atoms > 1``).
        v_max: The highest.
        noisy: Noisy layers after the encoder.
        sigma0: `NoisyLinear`'s initial noise scale.
    """

    def __init__(
        self,
        encoder: nn.Module,
        feature_dim: int,
        num_actions: int,
        hidden: Sequence[int] = (64, 64),
        activation: Callable[[], nn.Module] = nn.ReLU,
        dueling: bool = True,
        mask_size: int = 0,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
        noisy: bool = False,
        sigma0: float = 0.5,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.mask_size = int(mask_size)
        self.dueling = dueling
        self.num_actions, self.num_atoms = int(num_actions), int(num_atoms)
        if noisy:
            layers: list[nn.Module] = []
            for width in hidden:
                layers += [NoisyLinear(feature_dim, width, sigma0), activation()]
                feature_dim = width
            self.trunk: nn.Module = nn.Sequential(*layers) if layers else nn.Identity()

            def head(n: int) -> nn.Module:
                return NoisyLinear(feature_dim, n, sigma0)

        else:
            if hidden:
                self.trunk = nn.Sequential(
                    MLP(feature_dim, hidden[-1], hidden[:-1], activation, HIDDEN_GAIN),
                    activation(),
                )
                feature_dim = hidden[-1]
            else:
                self.trunk = nn.Identity()

            def head(n: int) -> nn.Module:
                return layer_init(nn.Linear(feature_dim, n), 1.0)

        self.advantage = head(self.num_actions * self.num_atoms)
        self.value = head(self.num_atoms) if dueling else None
        support = torch.linspace(v_min, v_max, self.num_atoms)
        self.register_buffer("support", support, persistent=False)  # from the config

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """The return distribution's logits, ``batch_shape + [num_actions, num_atoms]``
        (unmasked)."""
        features = self.trunk(self.encoder(obs))
        shape = (*features.shape[:-1], self.num_actions, self.num_atoms)
        adv = self.advantage(features).reshape(shape)
        if self.value is None:
            return adv
        value = self.value(features).reshape(*shape[:-2], 1, self.num_atoms)
        return value + adv - adv.mean(dim=-2, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Returns Q-values shaped ``batch_shape + [num_actions]``."""
        if self.num_atoms == 1:
            q = self.logits(obs).squeeze(-1)
        else:
            q = (self.logits(obs).softmax(dim=-1) * self.support).sum(dim=-1)
        return apply_mask(q, obs, self.mask_size)


def apply_mask(scores: torch.Tensor, obs: torch.Tensor, mask_size: int) -> torch.Tensor:
    """``scores`` with the entries that the observation's trailing ``mask_size``
    entries mark illegal (< 0.5) set to `MASKED`; unchanged when ``mask_size`` is 0."""
    if not mask_size:
        return scores
    legal = obs[..., -mask_size:] > 0.5
    return torch.where(legal, scores, torch.full_like(scores, MASKED))
