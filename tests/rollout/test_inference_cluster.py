"""Rollout processes that act with a numpy copy of the policy never load torch.

A module of its own: its cluster's worker processes (tests/conftest.py) must not
have run a torch policy for an earlier test.
"""

import sys

import gymnasium as gym
import numpy as np
import pytest

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import WorkerSet

pytestmark = pytest.mark.cluster


def test_numpy_rollout_workers_sample_learnable_batches_without_torch(engine):
    env = gym.make("CartPole-v1")
    policy = PPOPolicy(env.observation_space, env.action_space, PPOPolicyConfig(seed=0))
    with WorkerSet(
        engine,
        "CartPole-v1",
        policy,
        num_workers=2,
        num_envs_per_worker=2,
        rollout_fragment_length=16,
        seed=0,
        remote_policy=policy.inference_copy(),
    ) as workers:
        batches = [batch for batch, _ in engine.gather(workers.sample())]
        assert [len(batch) for batch in batches] == [32, 32]
        assert "advantages" in batches[0] and batches[0]["logp"].dtype == np.float32
        policy.learn_on_batch(SampleBatch.concat_samples(batches))
        engine.gather(workers.sync_weights())
        remote = workers.foreach_worker(
            lambda w: (type(w.policy).__name__, "torch" in sys.modules, w.get_weights()),
            local=False,
        )
    for kind, has_torch, weights in remote:
        assert kind == "NumpyActorCritic" and not has_torch
        for name, value in policy.get_weights().items():
            np.testing.assert_array_equal(weights[name], value, err_msg=name)
