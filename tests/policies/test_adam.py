"""`Adam` against ``torch.optim.Adam``, and what using it leaves unimported."""

import subprocess
import sys

import pytest
import torch

from hrl_tasks.policies.adam import Adam


def tensors(seed, shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


@pytest.mark.parametrize("eps, weight_decay", [(1e-8, 0.0), (1e-5, 0.0), (1e-8, 0.1)])
@pytest.mark.parametrize("update", ["fused_update", "foreach_update"])
def test_steps_match_torch_adam_and_so_does_the_state_that_either_saves(
    eps, weight_decay, update, monkeypatch
):  # with weight decay, against torch.optim.AdamW
    if update == "foreach_update":  # as where torch has no fused kernel
        monkeypatch.delattr(torch, "_fused_adam_")
    shapes = [(4, 3), (3,), (1,)]
    ours = [p.clone().requires_grad_() for p in tensors(0, shapes)]
    theirs = [p.clone().requires_grad_() for p in tensors(0, shapes)]
    torch_class = torch.optim.AdamW if weight_decay else torch.optim.Adam
    decay = {"weight_decay": weight_decay}
    mine = Adam(ours, lr=3e-3, eps=eps, **decay)
    torchs = torch_class(theirs, lr=3e-3, eps=eps, **decay)
    for step in range(60):
        grads = tensors(step + 1, shapes)
        if step % 7 == 3:  # a parameter without a gradient is left as it is
            grads[1] = None
        for params in (ours, theirs):
            for p, g in zip(params, grads, strict=True):
                p.grad = None if g is None else g.clone()
        mine.step()
        torchs.step()
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # Each loads the other's state, and they go on alike.
    swapped_ours = Adam([p.detach().clone().requires_grad_() for p in theirs], lr=3e-3, eps=eps,
                        **decay)  # fmt: skip
    swapped_ours.load_state_dict(torchs.state_dict())
    swapped_torch = torch_class([p.detach().clone().requires_grad_() for p in ours], lr=3e-3,
                                eps=eps, **decay)  # fmt: skip
    swapped_torch.load_state_dict(mine.state_dict())
    grads = tensors(99, shapes)
    for opt in (swapped_ours, swapped_torch):
        for p, g in zip(opt.param_groups[0]["params"], grads, strict=True):
            p.grad = g.clone()
        opt.step()
    for a, b in zip(swapped_ours.params, swapped_torch.param_groups[0]["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_state_of_other_parameters_is_refused_by_name():
    opt = Adam([torch.zeros(2, requires_grad=True)], lr=1e-3)
    other = Adam([torch.zeros(3, requires_grad=True)], lr=1e-3)
    other.params[0].grad = torch.ones(3)
    other.step()
    with pytest.raises(ValueError, match=r"shape \(3,\) for a parameter of shape \(2,\)"):
        opt.load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="for 2 parameters, not 1"):
        opt.load_state_dict(Adam([torch.zeros(1), torch.zeros(1)], lr=1).state_dict())


def test_a_policy_learns_without_importing_torch_dynamo():
    # The first step of a torch.optim optimizer imports torch._dynamo (about 1.5 s).
    code = (
        "import sys\n"
        "from hrl_tasks.policies import PPOPolicyConfig, PPOPolicy\n"
        "import gymnasium as gym\n"
        "env = gym.make('CartPole-v1')\n"
        "policy = PPOPolicy(env.observation_space, env.action_space, PPOPolicyConfig(seed=0))\n"
        "policy.optimizer.params[0].grad = policy.optimizer.params[0].detach() * 0 + 1\n"
        "policy.optimizer.step(); policy.get_state()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "False"
