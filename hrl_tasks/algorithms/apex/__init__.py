"""Ape-X: distributed prioritized experience replay."""

from hrl_tasks.lazy import lazy_names

# All on first use: the shared replay code imports `replay_shard` from here, and the
# plan imports torch.
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "config": ("ApeXConfig",),
        "learner": ("ReplayLearner",),
        "plan": ("ApeX",),
        "replay_shard": ("ReplayShard",),
    },
)

__all__ = ["ApeX", "ApeXConfig", "ReplayLearner", "ReplayShard"]
