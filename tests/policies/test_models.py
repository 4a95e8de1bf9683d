import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from hrl_tasks.policies.distributions import make_action_dist
from hrl_tasks.policies.models import CNN, MLP, ActorCritic, QNetwork, make_encoder


def test_mlp_shapes_and_orthogonal_init():
    torch.manual_seed(0)
    mlp = MLP(8, 3, hidden=(16, 4), output_gain=0.01)
    assert mlp(torch.zeros(2, 5, 8)).shape == (2, 5, 3)
    linears = [m for m in mlp if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(8, 16), (16, 4), (4, 3)]
    assert all(torch.count_nonzero(m.bias) == 0 for m in linears)
    # Rows of a wide orthogonal matrix are orthonormal, times the gain.
    w = linears[1].weight
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(4), atol=1e-5, rtol=0)
    w = linears[2].weight
    torch.testing.assert_close(w @ w.T, 1e-4 * torch.eye(3), atol=1e-8, rtol=0)
    assert isinstance(mlp[1], nn.Tanh)


def test_cnn_scales_uint8_and_keeps_leading_dims():
    cnn = CNN((36, 36, 3), out_dim=32)
    images = torch.randint(0, 256, (2, 3, 36, 36, 3), dtype=torch.uint8)
    out = cnn(images)
    assert out.shape == (2, 3, 32)
    # The same pixels given as floats in [0, 255] give the same features.
    torch.testing.assert_close(cnn(images.float()), out)
    manual = cnn.fc(cnn.convs(images[0].permute(0, 3, 1, 2).float() / 255.0))
    torch.testing.assert_close(out[0], manual)
    with pytest.raises(ValueError, match="H, W, C"):
        CNN((36, 36))


def test_make_encoder():
    image = gym.spaces.Box(0, 255, (36, 36, 1), np.uint8)
    encoder, dim = make_encoder(image)
    assert isinstance(encoder, CNN) and dim == 512
    encoder, dim = make_encoder(gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32))
    assert dim == 6 and encoder(torch.zeros(4, 2, 3)).shape == (4, 6)
    with pytest.raises(TypeError, match="Discrete"):
        make_encoder(gym.spaces.Discrete(3))


def grads_of(module, output):
    module.zero_grad()
    output.sum().backward()
    return {n: p.grad for n, p in module.named_parameters() if p.grad is not None}


def test_actor_critic_separate_and_shared_trunks():
    head = make_action_dist(gym.spaces.Discrete(2))
    obs = torch.randn(5, 4)
    separate = ActorCritic(nn.Identity(), 4, head, hidden=(8, 8))
    dist, values = separate(obs)
    assert dist.log_probs.shape == (5, 2) and values.shape == (5,)
    torch.testing.assert_close(separate.value(obs), values)
    assert all(name.startswith("critic.") for name in grads_of(separate, values))
    # CleanRL's init: near-uniform initial policy.
    assert dist.entropy().min().item() == pytest.approx(math.log(2), abs=1e-3)

    shared = ActorCritic(nn.Identity(), 4, head, hidden=(8, 8), shared=True)
    _, values = shared(obs)
    assert any(name.startswith("trunk.") for name in grads_of(shared, values))
    dist, _ = shared(obs)
    assert any(name.startswith("trunk.") for name in grads_of(shared, dist.log_probs[:, 0]))


def test_qnetwork_dueling_head():
    net = QNetwork(nn.Identity(), 4, num_actions=3, hidden=(16,))
    obs = torch.randn(6, 4)
    q = net(obs)
    assert q.shape == (6, 3)
    # Q = V + A - mean(A): the mean over actions is V(s).
    features = net.trunk(obs)
    torch.testing.assert_close(q.mean(-1), net.value(features).squeeze(-1))
    plain = QNetwork(nn.Identity(), 4, num_actions=3, hidden=(16,), dueling=False)
    assert plain.value is None
    torch.testing.assert_close(plain(obs), plain.advantage(plain.trunk(obs)))
