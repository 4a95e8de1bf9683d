"""`TorchPolicy`: the generic torch implementation of the `Policy` interface."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.adam import Adam
from hrl_tasks.policies.policy import Info, Policy
from hrl_tasks.policies.torch_utils import (
    gradient_norm,
    load_module_weights,
    module_weights,
    resolve_config,
    to_info,
    tree_to_numpy,
    tree_to_torch,
)


def adam(params, lr: float, **kwargs) -> Adam:
    """`Adam`, step for step ``torch.optim.Adam``, which would import ``torch._dynamo``."""
    return Adam(params, lr=lr, **kwargs)


class TorchPolicy(Policy):
    """A `Policy` over one torch model and one optimizer.

    Subclasses declare their config dataclass as ``config_class`` and implement
    `make_model`, `compute_actions` and `loss`; the constructor, gradients,
    weights, state, pickling and seeding are generic. A subclass that needs more
    at construction overrides `validate` (before the model is built) or `setup`
    (after). The config must have ``lr``, ``grad_clip`` (max global gradient
    norm, or None) and ``seed`` (None draws one). The policy owns a
    `torch.Generator` (``self.generator``) for exploration and shuffling, saved
    in its state, so a restored policy continues exactly as the original would
    have.

    Args:
        observation_space: A gymnasium space.
        action_space: A gymnasium space.
        config: An instance of ``config_class``; None uses its defaults.
        single_thread: Call ``torch.set_num_threads(1)`` (in rollout processes;
            kept when the policy is pickled to another process).

    Raises:
        TypeError: If `config` is neither None nor a ``config_class``.
    """

    config_class: ClassVar[type | None] = None
    """The config dataclass this policy takes (`resolve_config`); None (a subclass
    that declares none): `config` is used as given and must not be None."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any = None,
        *,
        single_thread: bool = False,
    ) -> None:
        config_class = type(self).config_class
        if config_class is not None:
            config = resolve_config(config, config_class)
        super().__init__(observation_space, action_space, config)
        self.validate()
        self.single_thread = single_thread
        if single_thread:
            torch.set_num_threads(1)
        self.generator = torch.Generator()
        if config.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(config.seed))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (), generator=self.generator)))
            self.model = self.make_model()
        self.params = list(self.model.parameters())  # looked up once: it is not free per step
        self._optimizer: Adam | None = None
        self._optimizer_state: dict | None = None  # loaded when the optimizer is built
        self.num_grad_updates = 0
        self.data_parallel = None  # a DataParallel while this copy learns in a learner group
        self.setup()

    def validate(self) -> None:
        """Raises if the policy cannot take its spaces or config.

        The constructor calls it once ``observation_space``, ``action_space`` and
        ``config`` are set, before anything is built; the default accepts all.
        """

    def setup(self) -> None:
        """What a subclass builds besides the model (e.g. a target network).

        The constructor calls it last, once the model and the generator exist;
        the default does nothing.
        """

    def seed(self, seed: int) -> None:
        """Reseeds ``self.generator``."""
        self.generator.manual_seed(int(seed))

    @abc.abstractmethod
    def make_model(self) -> nn.Module:
        """Builds the model (called once, under a seed derived from ``config.seed``)."""

    def make_optimizer(self, model: nn.Module) -> Adam:
        """Builds the optimizer; `Adam` with ``config.lr`` by default."""
        return adam(model.parameters(), lr=self.config.lr)

    @property
    def optimizer(self) -> Adam:
        """The optimizer, built on first use (rollout copies of a policy never step it)."""
        if self._optimizer is None:
            self._optimizer = self.make_optimizer(self.model)
            if self._optimizer_state is not None:
                self.load_optimizer_state(self._optimizer_state)
                self._optimizer_state = None
        return self._optimizer

    def load_optimizer_state(self, state: Any) -> None:
        """Loads the optimizer's moments and step counts; the learning rate stays this
        policy's ``config.lr`` (torch would take the saved one), so that a checkpoint
        restored with a new config, as population based training does, trains with it."""
        self._optimizer.load_state_dict(tree_to_torch(state))
        for group in self._optimizer.param_groups:
            group["lr"] = self.config.lr

    def set_lr(self, lr: float) -> None:
        """Sets the learning rate of every parameter group (a schedule's step). A
        restored optimizer state takes ``config.lr`` again."""
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    # Learning -------------------------------------------------------------------

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Info]:
        """Gradients of the total loss, clipped to ``config.grad_clip`` in global norm.

        Returns:
            ``(grads, info)``: one float32 array per ``model.parameters()`` entry,
            and the loss terms plus ``grad_norm`` (before clipping).
        """
        info = self._backward(batch)
        grads = [
            np.zeros(tuple(p.shape), np.float32) if p.grad is None else p.grad.numpy().copy()
            for p in self.params
        ]
        return grads, info

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """One optimizer step with `grads`; a None entry leaves its parameter out of the
        step (as a parameter that took no gradient in `learn_on_batch`).

        Raises:
            ValueError: If the number or shapes of `grads` do not match the parameters.
        """
        params = self.params
        if len(grads) != len(params):
            raise ValueError(f"got {len(grads)} gradients for {len(params)} parameters")
        for p, g in zip(params, grads, strict=True):
            if g is None:
                p.grad = None
                continue
            if tuple(np.shape(g)) != tuple(p.shape):
                raise ValueError(f"gradient shape {np.shape(g)} != parameter shape {p.shape}")
            p.grad = torch.from_numpy(np.array(g, dtype=np.float32))
        self._step()

    def learn_on_batch(self, batch: SampleBatch) -> Info:
        """One gradient step on `batch` (no numpy round trip of the gradients)."""
        info = self._backward(batch)
        self._step()
        return info

    def _backward(self, batch: SampleBatch) -> Info:
        return to_info(self._backward_terms(self.loss(batch), rows=len(batch)))

    def _backward_terms(
        self, terms: dict[str, torch.Tensor], rows: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Gradients of ``terms["total"]`` (a mean over ``rows`` rows), averaged over a
        learner group's members if this copy is in one, then clipped; returns the terms
        and ``grad_norm`` as tensors (converting each to a float costs a call per term
        and step)."""
        for p in self.params:
            p.grad = None
        group = self.data_parallel
        if group is not None and rows == 0:  # an empty share of a small minibatch
            for p in self.params:
                p.grad = torch.zeros_like(p) if p.requires_grad else None
        else:
            terms["total"].backward()
        if group is not None:
            if rows is None:
                raise ValueError(f"{type(self).__name__} learns in a group: pass the rows")
            group.average_gradients(self.params, rows)
        clip = self.config.grad_clip
        if clip is None:
            return {**terms, "grad_norm": gradient_norm(self.params)}
        return {**terms, "grad_norm": nn.utils.clip_grad_norm_(self.params, clip)}

    def _step(self) -> None:
        self.optimizer.step()
        self.num_grad_updates += 1

    def randn(self, shape) -> torch.Tensor:
        """Normal noise from ``self.generator`` for a batch's rows (leading axis). In a
        learner group, drawn for the whole batch and sliced to this learner's rows,
        so that the group draws what one learner would."""
        group = self.data_parallel
        if group is None or group.share is None:
            return torch.randn(tuple(shape), generator=self.generator)
        return group.randn(shape, self.generator)

    def data_parallel_unit(self) -> int | None:
        """Rows a learner group keeps together when it splits a batch between its
        learners (whole sequences); None: every learner takes the whole batch and
        picks its rows itself (PPO's minibatches). Default 1: any rows."""
        return 1

    # Weights and state ------------------------------------------------------------

    def get_weights(self) -> dict[str, np.ndarray]:
        return module_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Loads `weights` into the model.

        Raises:
            RuntimeError: If names or shapes do not match the model's.
        """
        load_module_weights(self.model, weights)

    def get_state(self) -> dict[str, Any]:
        return {
            "weights": self.get_weights(),
            "optimizer": (
                self._optimizer_state
                if self._optimizer is None and self._optimizer_state is not None
                else tree_to_numpy(self.optimizer.state_dict())
            ),
            "rng": self.get_rng_state(),
            "num_grad_updates": self.num_grad_updates,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
        if self._optimizer is None:
            self._optimizer_state = state["optimizer"]
        else:
            self.load_optimizer_state(state["optimizer"])
        self.set_rng_state(state["rng"])
        self.num_grad_updates = int(state["num_grad_updates"])

    def learning_snapshot(self) -> tuple:
        """What an update changes, kept as tensor copies (cheaper than `get_state`'s
        numpy): the model's tensors, the optimizer's moments, the generator, the update
        count. A learner group rolls a failed update back with
        `restore_learning_snapshot`."""
        optimizer = self.optimizer  # built now, with any optimizer state loaded and waiting
        with torch.no_grad():
            return (
                [t.clone() for t in self.model.state_dict().values()],
                {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.state.items()},
                self.generator.get_state(),
                self.num_grad_updates,
            )

    def restore_learning_snapshot(self, snapshot: tuple) -> None:
        """Puts back what `learning_snapshot` kept."""
        tensors, optimizer_state, rng, num_grad_updates = snapshot
        with torch.no_grad():
            for tensor, saved in zip(self.model.state_dict().values(), tensors, strict=True):
                tensor.copy_(saved)
        self.optimizer.state = optimizer_state
        self.generator.set_state(rng)
        self.num_grad_updates = num_grad_updates

    def get_rng_state(self) -> np.ndarray:
        return self.generator.get_state().numpy().copy()

    def set_rng_state(self, state: np.ndarray) -> None:
        self.generator.set_state(torch.from_numpy(np.array(state, dtype=np.uint8)))

    def __reduce__(self) -> tuple:
        # Rebuild from spaces and config, then load the numpy state: no torch objects pickled.
        args = (type(self), self.observation_space, self.action_space, self.config)
        return _rebuild_policy, (*args, self.single_thread, self.get_state())

    # Helpers for subclasses ---------------------------------------------------------

    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Converts a batch of observations to a tensor (uint8 kept, else float32).

        Writable, contiguous uint8 observations (image frames, such as a batch's
        column received from a rollout worker) are not copied: the tensor shares
        their memory, and the models turn them into new float tensors.

        Raises:
            ValueError: If the shape is not ``[B, *observation_space.shape]`` (or
                ``[T, B, *shape]``: any leading batch axes).
        """
        obs = np.asarray(obs)
        shape = tuple(self.observation_space.shape)
        n_lead = obs.ndim - len(shape)
        if n_lead < 1 or obs.shape[n_lead:] != shape:
            raise ValueError(f"expected observations of shape [B, *{shape}], got {obs.shape}")
        if obs.dtype == np.uint8 and obs.flags.c_contiguous and obs.flags.writeable:
            return torch.from_numpy(obs)  # image frames: read in place (models make floats)
        dtype = np.uint8 if obs.dtype == np.uint8 else np.float32
        return torch.from_numpy(np.array(obs, dtype=dtype))

    def column(self, batch: SampleBatch, name: str, dtype: Any = np.float32) -> torch.Tensor:
        """Column `name` of `batch` as a new tensor of numpy `dtype`.

        Raises:
            KeyError: If the column is missing (the message names the policy).
        """
        if name not in batch:
            raise KeyError(f"{type(self).__name__} needs column {name!r}; have {batch.columns}")
        return torch.from_numpy(np.array(batch[name], dtype=dtype))

    def to_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Converts sampled actions to numpy in the action space's dtype."""
        return actions.detach().numpy().astype(self.action_space.dtype, copy=False)


def _rebuild_policy(
    cls: type[TorchPolicy],
    observation_space: gym.Space,
    action_space: gym.Space,
    config: Any,
    single_thread: bool,
    state: dict[str, Any],
) -> TorchPolicy:
    policy = cls(observation_space, action_space, config, single_thread=single_thread)
    policy.set_state(state)
    return policy
