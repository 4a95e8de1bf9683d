"""APPO's plan is IMPALA's: asynchronous sampling feeds the learner thread, which now
takes clipped-surrogate steps (`APPOPolicy`) instead of V-trace policy-gradient steps."""

from hrl_tasks.algorithms.appo.config import APPOConfig
from hrl_tasks.algorithms.impala import IMPALA
from hrl_tasks.policies.appo import APPOPolicy
from hrl_tasks.policies.configs import APPOPolicyConfig


class APPO(IMPALA):
    """Asynchronous PPO (RLlib's APPO; Sample Factory, https://arxiv.org/abs/2006.11751).

    Rollout workers sample with the weights they last received, ``num_async``
    requests in flight each; the learner thread in the driver concatenates
    batches to ``train_batch_size`` steps and takes ``num_sgd_iter`` steps of
    PPO's clipped surrogate on V-trace advantages, the ratio taken against the
    behaviour ``logp`` of each batch. Everything but the loss is IMPALA's.
    """

    name = "appo"
    policy_class = APPOPolicy
    policy_config_class = APPOPolicyConfig
    config_class = APPOConfig
