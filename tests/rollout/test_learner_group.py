"""A learner group of worker processes: the update of one learner, through losses of learners."""

import os
import signal
import threading

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import PPO
from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import (
    IMPALAPolicy,
    IMPALAPolicyConfig,
    PPOPolicy,
    PPOPolicyConfig,
    SACPolicy,
    SACPolicyConfig,
)
from hrl_tasks.rollout.learner_group import LearnerGroup, LearnerGroupError
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

pytestmark = pytest.mark.cluster

CASES = {
    "ppo": lambda: PPOPolicy(*cartpole_spaces(), PPOPolicyConfig(seed=2, minibatch_size=24)),
    "impala": lambda: IMPALAPolicy(*pendulum_spaces(), IMPALAPolicyConfig(
        seed=2, rollout_fragment_length=16)),
    "sac": lambda: SACPolicy(*pendulum_spaces(), SACPolicyConfig(seed=2, hidden=(32, 32))),
}  # fmt: skip


def batch_for(policy, fragments=6, length=16, seed=0):
    parts = [policy.postprocess_trajectory(fragment(policy, length, seed=seed + s))
             for s in range(fragments)]  # fmt: skip
    return SampleBatch.concat_samples(parts)


def assert_close_weights(got, want):
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)


@pytest.fixture
def three_workers():
    """Its own cluster: two learners, and room for one re-created after a kill."""
    with hrl_tasks.Engine.local(n_workers=3, threads_per_worker=1) as engine:
        yield engine


def test_two_learner_processes_take_the_update_of_one(three_workers):
    for name, make in CASES.items():
        alone, driver, sampler = make(), make(), make()  # sampling draws from its generator
        group = LearnerGroup(three_workers, driver, 2, resources={"CPU": 1})
        try:
            addresses = {handle.address for handle in group.handles}
            assert len(addresses) == 2, "each learner has a process of its own"
            for seed in range(2):
                batch = batch_for(sampler, seed=seed)
                info = group.learn_on_batch(batch)
                alone_info = alone.learn_on_batch(batch)
                if hasattr(alone, "update_target"):
                    group.update_target()
                    alone.update_target()
            assert info.keys() == alone_info.keys(), name
            group.pull_state()  # weights, optimizer, targets: as the lone learner's
            assert_close_weights(driver.get_weights(), alone.get_weights())
            assert driver.num_grad_updates == alone.num_grad_updates
            if name == "sac":
                assert driver.num_target_updates == alone.num_target_updates == 2
        finally:
            group.stop()


@pytest.mark.timeout(240)
def test_a_learner_killed_while_the_group_learns_costs_nothing(three_workers):
    """The survivor rolls back, the group forms again and repeats the update: the
    weights are those of a lone learner that lost nothing."""

    def make():
        return PPOPolicy(
            *cartpole_spaces(), PPOPolicyConfig(seed=4, minibatch_size=8, num_sgd_iter=10)
        )

    alone, driver = make(), make()
    group = LearnerGroup(three_workers, driver, 2, resources={"CPU": 1})
    try:
        batch = batch_for(make(), fragments=8)  # 128 rows, 160 minibatch steps per update
        group.learn_on_batch(batch)
        alone.learn_on_batch(batch)
        victim = group.handles[1]
        pid = three_workers.client.run(os.getpid, workers=[victim.address])[victim.address]
        killer = threading.Timer(0.1, os.kill, (pid, signal.SIGKILL))
        killer.start()
        for _ in range(3):  # the kill lands in the first update, or fails the next one
            group.learn_on_batch(batch)
            alone.learn_on_batch(batch)
            if group.reforms:
                break
        killer.join()
        assert group.reforms == 1 and victim.restarts == 1
        group.learn_on_batch(batch)  # the re-formed group goes on
        alone.learn_on_batch(batch)
        group.pull_weights()
        assert_close_weights(driver.get_weights(), alone.get_weights())
    finally:
        group.stop()


def test_an_algorithm_with_two_learners_learns_what_the_driver_learns():
    settings = {"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 32,
                "train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2, "seed": 5}  # fmt: skip
    weights = {}
    for learners in (0, 2):
        with PPO(settings, num_learners=learners) as algo:
            for _ in range(2):
                result = algo.train()
            assert result["env_steps_trained"] == 128
            algo.workers.pull_learner_weights()
            weights[learners] = algo.policy.get_weights()
    assert_close_weights(weights[2], weights[0])


def test_sac_learns_checkpoints_and_resumes_with_two_learners(tmp_path):
    from hrl_tasks.algorithms import SAC

    settings = {"env": "Pendulum-v1", "num_workers": 1, "rollout_fragment_length": 32,
                "learning_starts": 64, "train_batch_size": 32, "training_intensity": 8,
                "hidden": (32, 32), "min_steps_per_report": 64, "seed": 6, "num_learners": 2}  # fmt: skip
    with SAC(settings) as algo:
        for _ in range(2):
            result = algo.train()
        assert result["env_steps_trained"] > 0
        path = algo.save(tmp_path / "sac.hrl")  # pulls the learners' state
        saved = algo.policy.get_state()
        assert saved["num_target_updates"] == algo.ctx.counters["target_updates"] > 0
    with SAC(settings) as again:
        again.restore(path)
        learners = [h.call("get_policy_state", direct=True).result()
                    for h in again.workers.learner_group.handles]  # fmt: skip
        for state in learners:  # every learner holds the checkpoint's state
            assert_close_weights(state["weights"], saved["weights"])
            assert_close_weights(state["target_weights"], saved["target_weights"])
            assert state["num_grad_updates"] == saved["num_grad_updates"]
        assert again.train()["env_steps_trained"] > result["env_steps_trained"]


def test_impala_learns_with_two_learners():
    from hrl_tasks.algorithms import IMPALA

    settings = {"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 16,
                "train_batch_size": 64, "min_steps_per_report": 128, "seed": 7,
                "num_learners": 2}  # fmt: skip
    with IMPALA(settings) as algo:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["env_steps_trained"] >= 128
        assert algo.workers.learner_group.reforms == 0
        assert algo.evaluate(episodes=1)["evaluation_return_mean"] > 0


def test_learners_that_would_share_a_process_are_refused():
    with (
        hrl_tasks.Engine.local(n_workers=1, threads_per_worker=2) as engine,  # room for two
        pytest.raises(LearnerGroupError, match="learners share a worker process"),
    ):
        LearnerGroup(engine, CASES["ppo"](), 2, resources={"CPU": 1})
