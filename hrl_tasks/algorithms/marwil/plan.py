"""MARWIL's and BC's plan: batches read from recorded experience, one gradient step each."""

from __future__ import annotations

from hrl_tasks.algorithms.marwil.config import BCConfig, MARWILConfig
from hrl_tasks.algorithms.offline import OfflineAlgorithm
from hrl_tasks.policies.configs import MARWILPolicyConfig
from hrl_tasks.policies.marwil import MARWILPolicy


class MARWIL(OfflineAlgorithm):
    """Advantage-weighted imitation of recorded actions (Wang et al. 2018), from a
    recording made with ``record_experience`` or written in its schema."""

    name = "marwil"
    policy_class = MARWILPolicy
    policy_config_class = MARWILPolicyConfig
    config_class = MARWILConfig

    def postprocess(self):
        return self.workers.learner.postprocessor()  # discounted returns, per episode


class BC(MARWIL):
    """Behaviour cloning: MARWIL with ``beta`` 0."""

    name = "bc"
    config_class = BCConfig
