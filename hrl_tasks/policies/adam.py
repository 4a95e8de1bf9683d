"""`Adam`: the optimizer of every `TorchPolicy`, without ``torch.optim``.

The first ``step()`` of any ``torch.optim`` optimizer imports ``torch._dynamo``
(``Optimizer.step`` calls ``torch._dynamo.graph_break()``): about 1.5 s of CPU
here, a third of what ``hrl-tasks train`` took to start. This one calls the
fused kernel of ``torch.optim.Adam(fused=True)`` itself (or, where torch lacks
it, multi-tensor operations), and matches ``torch.optim.Adam`` step for step
(tested, both ways).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


class Adam:
    """Adam (Kingma and Ba, 2015), as ``torch.optim.Adam`` without amsgrad or
    maximize; with ``weight_decay``, AdamW (Loshchilov and Hutter, 2019) as
    ``torch.optim.AdamW``: each parameter shrunk by ``lr * weight_decay`` before the
    Adam step.

    Its ``state_dict()`` has ``torch.optim.Adam``'s (and ``AdamW``'s) layout, so that
    the state of either loads into the other.

    Args:
        params: the tensors to optimize (their ``.grad`` is read by `step`).
        lr: the learning rate (``param_groups[0]["lr"]`` may change it later).
        betas: the decay rates of the first and second moments.
        eps: added to the denominator.
        weight_decay: decoupled weight decay (0: plain Adam).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got no parameters to optimize")
        self.param_groups = [
            {
                "params": self.params,
                "lr": float(lr),
                "betas": tuple(map(float, betas)),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
                "amsgrad": False,
                "maximize": False,
            }
        ]
        self.state: dict[int, dict[str, Any]] = {}  # by parameter index, from its first step

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        group = self.param_groups[0]
        indices = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not indices:
            return
        for i in indices:
            if i not in self.state:
                p = self.params[i]
                self.state[i] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                }
        states = [self.state[i] for i in indices]
        params = [self.params[i] for i in indices]
        moments = ([s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states])
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        if group["weight_decay"]:  # AdamW's decoupled decay, before the moments' step
            torch._foreach_mul_(params, 1.0 - group["lr"] * group["weight_decay"])
        update = fused_update if has_fused_kernel(params[0]) else foreach_update
        update(params, [p.grad for p in params], *moments, steps, group)

    def state_dict(self) -> dict:
        """The moments and step counts, and the settings, as ``torch.optim.Adam`` has them."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        state = {
            i: {
                "step": s["step"].clone(),
                "exp_avg": s["exp_avg"].clone(),
                "exp_avg_sq": s["exp_avg_sq"].clone(),
            }
            for i, s in self.state.items()
        }
        return {
            "state": state,
            "param_groups": [{**group, "params": list(range(len(self.params)))}],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads what `state_dict` (or ``torch.optim.Adam.state_dict``) returned.

        Raises:
            ValueError: if it holds another number of parameters, or moments of
                other shapes.
        """
        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(
                f"optimizer state for {len(group['params'])} parameters, not {len(self.params)}"
            )
        loaded = {}
        for key, saved in state_dict["state"].items():
            i = group["params"].index(int(key))
            p = self.params[i]
            moments = [torch.as_tensor(saved[k], dtype=p.dtype) for k in ("exp_avg", "exp_avg_sq")]
            if any(m.shape != p.shape for m in moments):
                raise ValueError(
                    f"optimizer moments of shape {tuple(moments[0].shape)} for a "
                    f"parameter of shape {tuple(p.shape)}"
                )
            loaded[i] = {
                "step": torch.tensor(float(saved["step"])),
                "exp_avg": moments[0].clone(),
                "exp_avg_sq": moments[1].clone(),
            }
        self.state = loaded
        # (weight_decay stays this optimizer's own: a saved AdamW's loads into an Adam)
        self.param_groups[0].update({k: float(group[k]) for k in ("lr", "eps") if k in group})
        if "betas" in group:
            self.param_groups[0]["betas"] = tuple(map(float, group["betas"]))


def has_fused_kernel(param: torch.Tensor) -> bool:
    """Whether torch has Adam's fused kernel for ``param``'s device: CUDA since 2.0, CPU
    since 2.4 (older CPU builds have the operation but fail in it)."""
    if not hasattr(torch, "_fused_adam_"):
        return False
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return param.device.type != "cpu" or version >= (2, 4)


def fused_update(params, grads, exp_avgs, exp_avg_sqs, steps, group) -> None:
    """Adam's update in one operation for all parameters: the kernel of
    ``torch.optim.Adam(fused=True)`` (about 12% off a small PPO update on CPU)."""
    beta1, beta2 = group["betas"]
    torch._fused_adam_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=0.0,
        eps=group["eps"],
        amsgrad=False,
        maximize=False,
    )


def foreach_update(params, grads, exp_avgs, exp_avg_sqs, steps, group) -> None:
    """Adam's update in a handful of multi-tensor operations (where torch has no
    fused kernel)."""
    beta1, beta2 = group["betas"]
    counts = [float(step) for step in steps]
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    # torch's multi-tensor kernels (what Adam(foreach=True) runs) have no public name.
    denominators = torch._foreach_sqrt(exp_avg_sqs)  # noqa: SLF001
    torch._foreach_div_(denominators, [math.sqrt(1 - beta2**n) for n in counts])
    torch._foreach_add_(denominators, group["eps"])
    torch._foreach_addcdiv_(
        params, exp_avgs, denominators, [-group["lr"] / (1 - beta1**n) for n in counts]
    )
