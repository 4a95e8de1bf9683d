"""A policy-and-value network for board games (AlphaZero): residual convolutions,
a policy head of logits over actions and a value head in [-1, 1].

Inputs are PettingZoo's observation planes, ``[B, H, W, C]`` (channels last, as
PettingZoo gives them); the network moves channels first itself.

`PolicyValuePolicy` is the network as a learning `TorchPolicy` (AdamW, AlphaZero's
loss), so that it learns where other policies learn: in the driver, or in a
`Learner` worker of its own (``num_learners=1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.adam import Adam
from hrl_tasks.policies.torch_policy import TorchPolicy


@dataclass(frozen=True)
class PolicyValueSpec:
    """Everything needed to build the network again in another process."""

    observation_shape: tuple[int, ...]
    num_actions: int
    channels: int = 64
    blocks: int = 3

    def build(self) -> PolicyValueNet:
        return PolicyValueNet(self)


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(x + self.norm2(self.conv2(y)))


class PolicyValueNet(nn.Module):
    """``forward(planes) -> (logits [B, num_actions], value [B])``."""

    def __init__(self, spec: PolicyValueSpec):
        super().__init__()
        self.spec = spec
        height, width, planes = spec.observation_shape
        c = spec.channels
        self.stem = nn.Sequential(
            nn.Conv2d(planes, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        )
        self.body = nn.Sequential(*[ResidualBlock(c) for _ in range(spec.blocks)])
        self.policy_head = nn.Sequential(
            nn.Conv2d(c, 2, 1, bias=False),
            nn.BatchNorm2d(2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(2 * height * width, spec.num_actions),
        )
        self.value_head = nn.Sequential(
            nn.Conv2d(c, 1, 1, bias=False),
            nn.BatchNorm2d(1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(height * width, 64),
            nn.ReLU(),
            nn.Linear(64, 1),
            nn.Tanh(),
        )

    def forward(self, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.body(self.stem(planes.permute(0, 3, 1, 2)))
        return self.policy_head(x), self.value_head(x).squeeze(-1)

    @torch.no_grad()
    def predict(self, observations: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Numpy in, numpy out, in evaluation mode: ``(logits, values)``."""
        self.eval()
        logits, values = self(torch.as_tensor(observations, dtype=torch.float32))
        return logits.numpy(), values.numpy()

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})


def policy_value_terms(
    net: PolicyValueNet,
    observations: torch.Tensor,
    masks: torch.Tensor,
    target_policies: torch.Tensor,
    target_values: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """AlphaZero's loss: ``total``, the cross-entropy to the search policy
    (``policy_loss``) plus the squared value error (``value_loss``); weight decay is
    the optimizer's. Illegal actions are masked out of the logits."""
    logits, values = net(observations)
    logits = logits.masked_fill(~masks, -1e9)
    policy_loss = -(target_policies * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
    value_loss = torch.mean((values - target_values) ** 2)
    return {"total": policy_loss + value_loss, "policy_loss": policy_loss, "value_loss": value_loss}


@dataclass
class PolicyValueConfig:
    """What `PolicyValuePolicy` is built from: the network's shape and its optimizer."""

    observation_shape: tuple[int, ...] = (3, 3, 2)
    num_actions: int = 9
    channels: int = 64
    blocks: int = 3
    lr: float = 1e-3
    weight_decay: float = 1e-4
    grad_clip: float | None = None
    seed: int | None = None

    @property
    def spec(self) -> PolicyValueSpec:
        return PolicyValueSpec(
            tuple(self.observation_shape), int(self.num_actions), self.channels, self.blocks
        )


class PolicyValuePolicy(TorchPolicy):
    """AlphaZero's network as a learning policy: `learn_on_batch` takes searched
    positions (``obs``, ``mask``, ``policy``: the search's visit distribution,
    ``value``: the game's outcome for the player to move) and takes one AdamW step on
    `policy_value_terms`. It acts through a tree search (`hrl_tasks.planning.mcts`),
    not `compute_actions`."""

    config_class = PolicyValueConfig

    def __init__(self, observation_space=None, action_space=None, config=None, **kwargs):
        config = config or PolicyValueConfig()
        if observation_space is None:
            observation_space = gym.spaces.Box(
                0.0, 1.0, tuple(config.observation_shape), np.float32
            )
        if action_space is None:
            action_space = gym.spaces.Discrete(int(config.num_actions))
        super().__init__(observation_space, action_space, config, **kwargs)

    def make_model(self) -> PolicyValueNet:
        return self.config.spec.build()

    def make_optimizer(self, model: nn.Module) -> Adam:
        return Adam(model.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay)

    def compute_actions(self, obs, explore=True):
        raise NotImplementedError(
            "AlphaZero's network acts through a tree search (hrl_tasks.planning.mcts.search)"
        )

    def loss(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        self.model.train()  # batch normalization on the batch's statistics
        return policy_value_terms(
            self.model,
            self.column(batch, "obs"),
            self.column(batch, "mask", np.bool_),
            self.column(batch, "policy"),
            self.column(batch, "value"),
        )
