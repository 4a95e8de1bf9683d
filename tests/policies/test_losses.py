import math

import pytest
import torch

from hrl_tasks.policies.losses import clipped_surrogate_loss, entropy_loss, value_loss


def test_clipped_surrogate_loss_by_hand():
    # ratios r and advantages A, clip 0.2; per sample min(r A, clip(r, 0.8, 1.2) A):
    #   r=1.5, A= 1 -> min(1.5, 1.2)   =  1.2  (clip active)
    #   r=0.5, A=-1 -> min(-0.5, -0.8) = -0.8  (clip active)
    #   r=1.1, A= 2 -> min(2.2, 2.2)   =  2.2
    #   r=0.5, A= 1 -> min(0.5, 0.8)   =  0.5  (unclipped is lower)
    #   r=1.5, A=-1 -> min(-1.5, -1.2) = -1.5  (unclipped is lower)
    # loss = -(1.2 - 0.8 + 2.2 + 0.5 - 1.5) / 5 = -0.32
    ratios = [1.5, 0.5, 1.1, 0.5, 1.5]
    old_logp = torch.tensor([-1.0, -2.0, -0.5, -1.5, -3.0], dtype=torch.float64)
    logp = (old_logp + torch.log(torch.tensor(ratios, dtype=torch.float64))).requires_grad_()
    advantages = torch.tensor([1.0, -1.0, 2.0, 1.0, -1.0], dtype=torch.float64)
    loss = clipped_surrogate_loss(logp, old_logp, advantages, clip=0.2)
    assert loss.shape == ()
    assert loss.item() == pytest.approx(-0.32)
    loss.backward()
    # d loss / d logp_i = -r_i A_i / 5 where the unclipped term is chosen, 0 where clipped.
    expected = [0.0, 0.0, -1.1 * 2 / 5, -0.5 / 5, 1.5 / 5]
    torch.testing.assert_close(logp.grad, torch.tensor(expected, dtype=torch.float64))


def test_clipped_surrogate_loss_on_policy_is_minus_mean_advantage():
    logp = torch.randn(8, generator=torch.Generator().manual_seed(0))
    advantages = torch.arange(8.0)
    loss = clipped_surrogate_loss(logp, logp.clone(), advantages, clip=0.1)
    assert loss.item() == pytest.approx(-advantages.mean().item())


def test_clipped_surrogate_loss_checks_shapes_and_clip():
    with pytest.raises(ValueError, match="shapes"):
        clipped_surrogate_loss(torch.zeros(3), torch.zeros(3), torch.zeros(2), 0.2)
    with pytest.raises(ValueError, match="clip"):
        clipped_surrogate_loss(torch.zeros(3), torch.zeros(3), torch.zeros(3), 0.0)


def test_value_loss_by_hand():
    values = torch.tensor([1.0, 2.0])
    targets = torch.zeros(2)
    # 0.5 * mean(1, 4) = 1.25
    assert value_loss(values, targets).item() == pytest.approx(1.25)
    # old = [0, 3], clip 0.5: V_clip = [0.5, 2.5]; squared [1, 4] vs [0.25, 6.25];
    # elementwise max [1, 6.25] -> 0.5 * 3.625 = 1.8125
    old = torch.tensor([0.0, 3.0])
    assert value_loss(values, targets, clip=0.5, old_values=old).item() == pytest.approx(1.8125)
    with pytest.raises(ValueError, match="old_values"):
        value_loss(values, targets, clip=0.5)


def test_entropy_loss():
    assert entropy_loss(torch.tensor([1.0, 3.0])).item() == pytest.approx(-2.0)
    assert math.isclose(entropy_loss(torch.full((4,), 0.5)).item(), -0.5)


def test_replay_actor_critic_losses_against_a_loop():
    from hrl_tasks.policies.losses import (
        sac_actor_loss,
        soft_q_targets,
        soft_values,
        temperature_loss,
        twin_q_loss,
    )

    g = torch.Generator().manual_seed(0)
    n, k = 7, 3
    r, d, q1, q2, nq1, nq2, logp = (torch.randn(n, generator=g) for _ in range(7))
    w = torch.rand(n, generator=g)
    alpha = 0.3
    y = soft_q_targets(r, d, nq1, nq2, logp, alpha)
    for i in range(n):
        expected = r[i] + d[i] * (min(nq1[i], nq2[i]) - alpha * logp[i])
        assert y[i].item() == pytest.approx(expected.item(), abs=1e-6)
    critic = sum(w[i] * ((q1[i] - y[i]) ** 2 + (q2[i] - y[i]) ** 2) for i in range(n)) / (2 * n)
    assert twin_q_loss(q1, q2, y, w).item() == pytest.approx(critic.item(), rel=1e-6)
    actor = sum(alpha * logp[i] - min(q1[i], q2[i]) for i in range(n)) / n
    assert sac_actor_loss(logp, q1, q2, alpha).item() == pytest.approx(actor.item(), rel=1e-6)
    # Discrete: expectations over pi on an action axis.
    Q1, Q2 = torch.randn(n, k, generator=g), torch.randn(n, k, generator=g)
    logits = torch.randn(n, k, generator=g)
    lp = logits.log_softmax(-1)
    v = soft_values(Q1, Q2, lp, alpha)
    loss = sac_actor_loss(lp, Q1, Q2, alpha)
    total = 0.0
    for i in range(n):
        vi = sum(lp[i, a].exp() * (min(Q1[i, a], Q2[i, a]) - alpha * lp[i, a]) for a in range(k))
        assert v[i].item() == pytest.approx(vi.item(), abs=1e-6)
        total += sum(lp[i, a].exp() * (alpha * lp[i, a] - min(Q1[i, a], Q2[i, a]))
                     for a in range(k))  # fmt: skip
    assert loss.item() == pytest.approx(total.item() / n, rel=1e-6)
    log_alpha = torch.tensor(0.5, requires_grad=True)
    temperature_loss(log_alpha, logp, -1.0).backward()
    assert log_alpha.grad.item() == pytest.approx(-(logp - 1.0).mean().item(), rel=1e-6)
    with pytest.raises(ValueError, match="shapes must match"):
        twin_q_loss(q1, q2[:3], y, w)
