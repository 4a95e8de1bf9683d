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
from torch import nn

from hrl_tasks.policies.distributions import ActionDistribution
from hrl_tasks.policies.spaces import MASKED, UnsupportedSpaceError

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


def make_encoder(observation_space: gym.Space) -> tuple[nn.Module, int]:
    """The feature extractor for an observation space.

    A uint8 3-D Box gets a `CNN` (512 features): channels first when the
    first axis is the shortest (``(4, 84, 84)``, stacked Atari frames), else
    channels last (``(H, W, C)``); any other Box is flattened over its own
    dimensions.

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


class QNetwork(nn.Module):
    """Q-values for discrete actions, optionally with a dueling head.

    Dueling (Wang et al. 2016, https://arxiv.org/abs/1511.06581, eq. 9):
    ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``.

    Args:
        encoder: Maps observations to ``feature_dim`` features.
        feature_dim: Width of the encoder output.
        num_actions: Number of discrete actions.
        hidden: Hidden widths of the shared trunk.
        activation: Activation factory.
        dueling: Use separate value and advantage heads.
        mask_size: As for `ActorCritic`: illegal actions' Q-values become `MASKED`.
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
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.mask_size = int(mask_size)
        self.dueling = dueling
        if hidden:
            self.trunk: nn.Module = nn.Sequential(
                MLP(feature_dim, hidden[-1], hidden[:-1], activation, HIDDEN_GAIN), activation()
            )
            feature_dim = hidden[-1]
        else:
            self.trunk = nn.Identity()
        self.advantage = layer_init(nn.Linear(feature_dim, num_actions), 1.0)
        self.value = layer_init(nn.Linear(feature_dim, 1), 1.0) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Returns Q-values shaped ``batch_shape + [num_actions]``."""
        features = self.trunk(self.encoder(obs))
        adv = self.advantage(features)
        q = (
            adv
            if self.value is None
            else self.value(features) + adv - adv.mean(dim=-1, keepdim=True)
        )
        return apply_mask(q, obs, self.mask_size)


def apply_mask(scores: torch.Tensor, obs: torch.Tensor, mask_size: int) -> torch.Tensor:
    """``scores`` with the entries that the observation's trailing ``mask_size``
    entries mark illegal (< 0.5) set to `MASKED`; unchanged when ``mask_size`` is 0."""
    if not mask_size:
        return scores
    legal = obs[..., -mask_size:] > 0.5
    return torch.where(legal, scores, torch.full_like(scores, MASKED))
