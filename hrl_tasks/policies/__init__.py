"""Policies: the `Policy` interface, torch models and distributions, pure estimators and losses.

Estimators (`gae`, `vtrace`, ...) and losses (`clipped_surrogate_loss`, ...)
are pure functions; the policy classes (`PGPolicy`, `PPOPolicy`, `DQNPolicy`,
`IMPALAPolicy`, `APPOPolicy`, `ESPolicy`) are thin layers over them, each with a
config dataclass. `NumpyActorCritic` and `NumpyQNetwork` are the numpy acting copies
that rollout workers use.

Names are imported from their modules on first use, so that a rollout process
acting with a numpy copy (`Policy.inference_copy`) never imports torch.
"""

from hrl_tasks.lazy import lazy_names

_MODULES = {
    "actor_critic": ("ActorCriticPolicy",),
    "appo": ("APPOPolicy",),
    "configs": (
        "APPOPolicyConfig",
        "CQLPolicyConfig",
        "DQNPolicyConfig",
        "ESPolicyConfig",
        "IMPALAPolicyConfig",
        "MARWILPolicyConfig",
        "PGPolicyConfig",
        "PPOPolicyConfig",
        "SACPolicyConfig",
        "TD3PolicyConfig",
    ),
    "distributions": (
        "ActionDistribution",
        "Categorical",
        "CategoricalHead",
        "DiagGaussian",
        "DiagGaussianHead",
        "make_action_dist",
    ),
    "dqn": ("N_STEP_DISCOUNTS", "DQNPolicy"),
    "es": ("NOISE_SEEDS", "RETURNS", "ESPolicy", "centered_ranks"),
    "estimators": (
        "discount_cumsum",
        "gae",
        "n_step_returns",
        "n_step_targets",
        "td_target_dqn",
        "vtrace",
    ),
    "impala": ("IMPALAPolicy",),
    "losses": ("clipped_surrogate_loss", "entropy_loss", "value_loss"),
    "models": ("CNN", "MLP", "ActorCritic", "QNetwork", "make_encoder"),
    "numpy_actor_critic": ("NumpyActorCritic",),
    "numpy_q": ("NumpyQNetwork",),
    "pg": ("PGPolicy",),
    "policy": ("Policy",),
    "postprocessing": ("add_discounted_returns", "add_gae"),
    "ppo": ("PPOPolicy",),
    "sac": ("SACPolicy",),
    "td3": ("TD3Policy",),
    "spaces": ("UnsupportedSpaceError",),
    "torch_policy": ("TorchPolicy",),
}
_lazy_name, __dir__ = lazy_names(__name__, _MODULES)


def __getattr__(name: str):
    """A name of `_MODULES`, imported on first use; an old config name (`configs.renamed`)."""
    try:
        return _lazy_name(name)
    except AttributeError:
        from hrl_tasks.policies.configs import OLD_NAMES, renamed

        if name not in OLD_NAMES:
            raise
        renamed(__name__, name)  # warns
        return _lazy_name(OLD_NAMES[name])


__all__ = sorted(name for names in _MODULES.values() for name in names)
