"""A policy-and-value network for board games (AlphaZero): residual convolutions,
a policy head of logits over actions and a value head in [-1, 1].

Inputs are PettingZoo's observation planes, ``[B, H, W, C]`` (channels last, as
PettingZoo gives them); the network moves channels first itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


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
            nn.Conv2d(c, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
            nn.Linear(2 * height * width, spec.num_actions),
        )  # fmt: skip
        self.value_head = nn.Sequential(
            nn.Conv2d(c, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU(), nn.Flatten(),
            nn.Linear(height * width, 64), nn.ReLU(), nn.Linear(64, 1), nn.Tanh(),
        )  # fmt: skip

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


def policy_value_loss(
    net: PolicyValueNet,
    observations: torch.Tensor,
    masks: torch.Tensor,
    target_policies: torch.Tensor,
    target_values: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """AlphaZero's loss: cross-entropy to the search policy plus squared value error
    (weight decay is the optimizer's). Illegal actions are masked out of the logits."""
    logits, values = net(observations)
    logits = logits.masked_fill(~masks, -1e9)
    policy_loss = -(target_policies * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
    value_loss = torch.mean((values - target_values) ** 2)
    loss = policy_loss + value_loss
    return loss, {"policy_loss": policy_loss.item(), "value_loss": value_loss.item()}
