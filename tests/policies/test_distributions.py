import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import distributions as td

from hrl_tasks.policies.distributions import (
    Categorical,
    CategoricalHead,
    DiagGaussian,
    DiagGaussianHead,
    make_action_dist,
)


@pytest.fixture
def logits():
    return torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def gaussians(seed):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)
    log_std = 0.5 * torch.randn(2, generator=g, dtype=torch.float64)
    return mean, log_std


def test_categorical_matches_torch(logits):
    dist, ref = Categorical(logits), td.Categorical(logits=logits)
    actions = torch.randint(4, (3, 5))
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    other = torch.randn_like(logits)
    torch.testing.assert_close(
        dist.kl(Categorical(other)), td.kl_divergence(ref, td.Categorical(logits=other))
    )
    torch.testing.assert_close(dist.kl(dist), torch.zeros(3, 5, dtype=torch.float64))
    assert torch.equal(dist.deterministic(), logits.argmax(-1))


def test_categorical_entropy_closed_forms():
    uniform = Categorical(torch.zeros(2, 6))
    torch.testing.assert_close(uniform.entropy(), torch.full((2,), math.log(6)))
    # A masked (-inf) action contributes nothing and yields no NaN.
    masked = Categorical(torch.tensor([[0.0, 0.0, -math.inf]]))
    torch.testing.assert_close(masked.entropy(), torch.tensor([math.log(2)]))
    assert masked.logp(torch.tensor([0])).item() == pytest.approx(math.log(0.5))


def test_categorical_sample_uses_the_generator():
    dist = Categorical(torch.log(torch.tensor([[0.2, 0.8]])).expand(4000, 2))
    first = dist.sample(torch.Generator().manual_seed(7))
    again = dist.sample(torch.Generator().manual_seed(7))
    assert torch.equal(first, again)
    assert first.shape == (4000,) and first.dtype == torch.int64
    assert first.float().mean().item() == pytest.approx(0.8, abs=0.03)


def test_diag_gaussian_matches_torch():
    mean, log_std = gaussians(1)
    dist = DiagGaussian(mean, log_std)
    ref = td.Independent(td.Normal(mean, log_std.exp().expand_as(mean)), 1)
    actions = torch.randn_like(mean)
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    mean2, log_std2 = gaussians(2)
    ref2 = td.Independent(td.Normal(mean2, log_std2.exp().expand_as(mean2)), 1)
    torch.testing.assert_close(dist.kl(DiagGaussian(mean2, log_std2)), td.kl_divergence(ref, ref2))
    torch.testing.assert_close(dist.kl(dist), torch.zeros(3, 5, dtype=torch.float64))
    assert torch.equal(dist.deterministic(), mean)


def test_diag_gaussian_closed_forms():
    # Entropy of N(mu, s^2) per dimension is 0.5 * log(2 pi e s^2).
    dist = DiagGaussian(torch.zeros(1, 2), torch.tensor([0.0, math.log(2.0)]))
    expected = 0.5 * math.log(2 * math.pi * math.e) + 0.5 * math.log(2 * math.pi * math.e * 4)
    assert dist.entropy().item() == pytest.approx(expected)
    # KL(N(0,1) || N(1,1)) = 0.5 per dimension.
    kl = DiagGaussian(torch.zeros(1, 2), torch.zeros(2)).kl(
        DiagGaussian(torch.ones(1, 2), torch.zeros(2))
    )
    assert kl.item() == pytest.approx(1.0)


def test_diag_gaussian_samples():
    dist = DiagGaussian(torch.full((20000, 1), 3.0), torch.tensor([math.log(0.5)]))
    samples = dist.sample(torch.Generator().manual_seed(0))
    assert samples.shape == (20000, 1) and not samples.requires_grad
    assert samples.mean().item() == pytest.approx(3.0, abs=0.02)
    assert samples.std().item() == pytest.approx(0.5, abs=0.02)


def test_kl_between_kinds_is_an_error():
    with pytest.raises(TypeError, match="Categorical"):
        Categorical(torch.zeros(1, 2)).kl(DiagGaussian(torch.zeros(1, 2), torch.zeros(2)))


def test_make_action_dist_discrete_and_box():
    head = make_action_dist(gym.spaces.Discrete(3))
    assert isinstance(head, CategoricalHead) and head.num_inputs == 3
    assert isinstance(head(torch.zeros(2, 3)), Categorical)
    head = make_action_dist(gym.spaces.Box(-2.0, 2.0, (2,), np.float32), init_log_std=-0.5)
    assert isinstance(head, DiagGaussianHead) and head.num_inputs == 2
    assert [name for name, _ in head.named_parameters()] == ["log_std"]
    dist = head(torch.zeros(4, 2))
    assert isinstance(dist, DiagGaussian)
    torch.testing.assert_close(dist.log_std, torch.full((4, 2), -0.5))


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.MultiDiscrete([2, 3]),
        gym.spaces.MultiBinary(3),
        gym.spaces.Tuple([gym.spaces.Discrete(2)]),
    ],
)
def test_make_action_dist_rejects_other_spaces(space):
    with pytest.raises(TypeError) as err:
        make_action_dist(space)
    message = str(err.value)
    assert type(space).__name__ in message and "Discrete" in message and "Box" in message


def test_make_action_dist_rejects_bad_shapes():
    with pytest.raises(ValueError, match="1-D"):
        make_action_dist(gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32))
    with pytest.raises(ValueError, match="start at 0"):
        make_action_dist(gym.spaces.Discrete(3, start=1))
