"""A3C with its gradients applied in the driver, and by a learner process of its own."""

import os
import signal

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.algorithms import A3C
from hrl_tasks.algorithms.algorithm import read_checkpoint
from hrl_tasks.algorithms.config import ConfigError

TINY = {
    "num_workers": 2,
    "num_envs_per_worker": 2,
    "rollout_fragment_length": 16,
    "min_steps_per_report": 128,
    "seed": 5,
}
APART = {**TINY, "num_learners": 1}


def test_config_refuses_a_learner_group_and_a_learner_without_direct_calls():
    with pytest.raises(ConfigError, match="num_learners must be 0 .* or 1"):
        A3C.config_class.from_dict({"num_learners": 2})
    with pytest.raises(ConfigError, match="needs direct_calls=True"):
        A3C.config_class.from_dict({"num_learners": 1, "direct_calls": False})


def applied_in(policy) -> int:
    return policy.get_state()["num_grad_updates"]


@pytest.mark.cluster
def test_the_learner_apart_applies_every_gradient_and_the_driver_none(engine):
    algo = A3C(APART, engine=engine)
    driver_policy = algo.workers.local_worker.policy  # the learner's replies land here
    initial = driver_policy.get_weights()
    try:
        first, second = algo.train(), algo.train()
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 128
        assert second["env_steps_trained"] == second["env_steps_sampled"]
        assert second["info"]["learner_steps"] >= 2
        assert applied_in(driver_policy) == 0, "the driver applied gradients"
        learner = algo.workers.learner_group.handle
        state = learner.call("policy_state", direct=True).result()
        assert state["num_grad_updates"] >= second["info"]["learner_steps"]  # one on its way
        # The replies' weights reached the driver and the rollout workers.
        moved = driver_policy.get_weights()
        assert any(not np.array_equal(moved[k], initial[k]) for k in initial)
        algo.workers.engine.wait(algo.workers.sample(), timeout=30)
        remote = algo.workers.foreach_worker(lambda w: w.get_weights(), local=False)
        assert all(any(not np.array_equal(w[k], initial[k]) for k in initial) for w in remote)
    finally:
        algo.stop()


@pytest.mark.cluster
def test_save_and_restore_with_the_learner_apart(engine, tmp_path):
    first = A3C(APART, engine=engine)
    try:
        first.train()
        path = first.save(tmp_path / "a3c.hrl")
    finally:
        first.stop()
    saved = read_checkpoint(path)
    assert saved["policy"]["num_grad_updates"] > 0  # the learner's state, pulled
    second = A3C(APART, engine=engine)
    try:
        second.restore(path)
        pushed = second.workers.learner_group.handle.call("policy_state", direct=True).result()
        assert pushed["num_grad_updates"] == saved["policy"]["num_grad_updates"]
        assert second.train()["iteration"] == 2
    finally:
        second.stop()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_killed_learner_is_made_again_from_its_last_state_and_the_run_goes_on():
    with hrl.Engine.local(n_workers=3, threads_per_worker=1) as engine:
        algo = A3C(APART, engine=engine)
        try:
            algo.train()
            learner = algo.workers.learner_group
            learner.pull_state()  # the state it is made again from
            kept = algo.workers.local_worker.policy.get_state()["num_grad_updates"]
            os.kill(engine.client.run(os.getpid)[learner.handle.address], signal.SIGKILL)
            results = [algo.train() for _ in range(3)]
            assert learner.handle.restarts == 1
            assert results[-1]["env_steps_trained"] > 0
            state = learner.handle.call("policy_state", direct=True).result()
            assert state["num_grad_updates"] > kept  # went on from there
        finally:
            algo.stop()
