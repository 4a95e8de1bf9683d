"""The offline algorithms' shared keys, with no torch (`hrl_tasks.algorithms.offline`
holds their plan): a config is checked before any cluster starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.errors import ConfigError

ESTIMATOR_NAMES = ("is", "wis", "dr")
"""The off-policy estimators ``off_policy_estimators`` names (`offline.ESTIMATORS`)."""


@dataclass
class OfflineConfig:
    """Keys of the algorithms that learn from recorded experience (`ReadExperience`)."""

    experience_input: str | None = None
    """The recording to learn from: a directory of Parquet files, a glob, or one file; a
    path or any fsspec URL (``s3://bucket/run``). Required."""
    updates_per_iteration: int = 100
    """Gradient steps of ``train_batch_size`` rows per iteration."""
    shuffle_window: int = 4
    """Files whose rows are mixed before batches are drawn."""
    evaluation_interval: int = 1
    """Iterations between evaluations (``evaluation_episodes`` greedy episodes in the
    driver, reported as ``episode_return_mean``); 0: never."""
    off_policy_estimators: tuple[str, ...] | None = None
    """At each evaluation, the learned policy's discounted return estimated from one
    recorded file by these: ``is`` (per-decision importance sampling), ``wis`` (its
    weighted form), ``dr`` (doubly robust, with a Q model of the policy fitted to the
    file's transitions first); reported as ``info/estimate/<name>``.
    They need the behaviour policy's ``logp`` in the recording. None: ``is`` and
    ``wis`` where the recording has it."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "updates_per_iteration": ">= 1",
        "shuffle_window": ">= 1",
        "evaluation_interval": ">= 0",
    }

    def check_offline(self) -> None:
        unknown = sorted(set(self.off_policy_estimators or ()) - set(ESTIMATOR_NAMES))
        if unknown:
            raise ConfigError(
                f"{type(self).__name__}.off_policy_estimators must name {sorted(ESTIMATOR_NAMES)}, "
                f"got {unknown[0]!r}"
            )
