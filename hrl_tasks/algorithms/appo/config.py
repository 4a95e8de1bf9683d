"""APPO's flat config: IMPALA's keys and the clipped surrogate's."""

from dataclasses import dataclass

from hrl_tasks.algorithms.impala.config import IMPALAConfig
from hrl_tasks.policies.configs import APPOPolicyConfig


@dataclass
class APPOConfig(IMPALAConfig, APPOPolicyConfig):
    """Every key of APPO: those of IMPALA's config, and the policy keys of
    ``hrl_tasks.policies.APPOConfig`` (``clip``, ``num_sgd_iter``)."""
