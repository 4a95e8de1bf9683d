"""PPO's observation normalization: the torch policy and its numpy copy agree."""

import numpy as np

from hrl_tasks.data.running_stats import RunningStats
from hrl_tasks.policies import NumpyActorCritic, PPOPolicy, PPOPolicyConfig
from tests.policies.synthetic import pendulum_spaces


def test_the_numpy_copy_normalizes_as_the_torch_policy_does():
    policy = PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(seed=0, normalize_observations=True))
    rng = np.random.default_rng(0)
    policy.update_observation_stats(RunningStats.of(rng.normal(4.0, 2.0, (500, 3)), (3,)))
    copy = policy.inference_copy()
    assert isinstance(copy, NumpyActorCritic) and copy.normalizes_observations
    obs = rng.normal(4.0, 2.0, (16, 3)).astype(np.float32)
    obs[0] = 1000.0  # far outside: clipped at 10 standard deviations on both sides
    actions, extras = policy.compute_actions(obs, explore=False)
    copied, copied_extras = copy.compute_actions(obs, explore=False)
    np.testing.assert_allclose(copied, actions, atol=1e-5)
    np.testing.assert_allclose(copied_extras["values"], extras["values"], atol=1e-5)
    np.testing.assert_allclose(copy.compute_values(obs), policy.compute_values(obs), atol=1e-5)
    # Without the setting there is no normalizer and nothing changes in the weights.
    plain = PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(seed=0))
    assert not plain.normalizes_observations and not plain.inference_copy().normalizes_observations
    assert not any(k.startswith("obs_normalizer") for k in plain.get_weights())
