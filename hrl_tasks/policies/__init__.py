"""Policies: the `Policy` interface, torch models and distributions, pure estimators and losses.

Estimators (`gae`, `vtrace`, ...) and losses (`clipped_surrogate_loss`, ...)
are pure functions; the policy classes (`PGPolicy`, `PPOPolicy`, `DQNPolicy`,
`IMPALAPolicy`, `APPOPolicy`, `ESPolicy`) are thin layers over them, each with a
config dataclass. `NumpyActorCritic` and `NumpyQNetwork` are the numpy acting copies
that rollout workers use.

Names are imported from their modules on first use, so that a rollout process
acting with a numpy copy (`Policy.inference_copy`) never imports torch.
"""

import importlib

_MODULES = {
    "actor_critic": ("ActorCriticPolicy",),
    "appo": ("APPOConfig", "APPOPolicy"),
    "distributions": (
        "ActionDistribution",
        "Categorical",
        "CategoricalHead",
        "DiagGaussian",
        "DiagGaussianHead",
        "make_action_dist",
    ),
    "dqn": ("N_STEP_DISCOUNTS", "DQNConfig", "DQNPolicy"),
    "es": ("NOISE_SEEDS", "RETURNS", "ESConfig", "ESPolicy", "centered_ranks"),
    "estimators": (
        "discount_cumsum",
        "gae",
        "n_step_returns",
        "n_step_targets",
        "td_target_dqn",
        "vtrace",
    ),
    "impala": ("IMPALAConfig", "IMPALAPolicy"),
    "losses": ("clipped_surrogate_loss", "entropy_loss", "value_loss"),
    "models": ("CNN", "MLP", "ActorCritic", "QNetwork", "make_encoder"),
    "numpy_actor_critic": ("NumpyActorCritic",),
    "numpy_q": ("NumpyQNetwork",),
    "pg": ("PGConfig", "PGPolicy"),
    "policy": ("Policy",),
    "postprocessing": ("add_discounted_returns", "add_gae"),
    "ppo": ("PPOConfig", "PPOPolicy"),
    "sac": ("SACConfig", "SACPolicy"),
    "td3": ("TD3Config", "TD3Policy"),
    "spaces": ("UnsupportedSpaceError",),
    "torch_policy": ("TorchPolicy",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
