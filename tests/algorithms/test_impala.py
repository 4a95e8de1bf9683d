"""IMPALA: the batch layout V-trace reads, the learner thread, and runs on a real cluster."""

import os
import signal

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.algorithms.algorithm import read_checkpoint
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.impala import IMPALA
from hrl_tasks.algorithms.impala.learner import LearnerError
from hrl_tasks.data import SampleBatch
from hrl_tasks.data.sample_batch import batches_decoded
from hrl_tasks.policies import IMPALAPolicy, IMPALAPolicyConfig
from hrl_tasks.rollout import RolloutWorker
from tests.policies.synthetic import cartpole_spaces

TINY = {
    "num_workers": 2,
    "num_envs_per_worker": 2,
    "rollout_fragment_length": 16,
    "train_batch_size": 64,
    "learner_queue_size": 1,
    "min_steps_per_report": 128,
    "seed": 3,
}
IN_DRIVER = {**TINY, "num_learners": 0}  # the learner thread in the driver (the default)
APART = {**TINY, "num_learners": 1}  # the learner in a process of its own


def test_rollout_batches_are_the_fragments_the_policy_expects():
    """A worker's batch is one time-ordered fragment per env; concatenations stay whole fragments."""
    policy = IMPALAPolicy(*cartpole_spaces(), IMPALAPolicyConfig(seed=0, rollout_fragment_length=8))
    worker = RolloutWorker("CartPole-v1", policy, num_envs=3, rollout_fragment_length=8, seed=0)
    try:
        batch = SampleBatch.concat_samples([worker.sample()[0], worker.sample()[0]])
    finally:
        worker.close()
    assert len(batch) == 2 * 3 * 8 and "logp" in batch and "next_values" in batch
    tm = policy.time_major(batch)
    assert tm["obs"].shape == (8, 6, 4) and tm["logp"].shape == (8, 6)
    eps = batch["eps_id"].reshape(6, 8).T  # the same reshape, on columns the loss does not read
    t = batch["t"].reshape(6, 8).T
    done = (batch["terminateds"] | batch["truncateds"]).reshape(6, 8).T
    # Down each fragment, time advances by one within an episode and restarts after its end.
    same = eps[1:] == eps[:-1]
    np.testing.assert_array_equal(same, ~done[:-1])
    np.testing.assert_array_equal(t[1:][same], t[:-1][same] + 1)
    assert np.isfinite(policy.loss(batch)["total"].item())


def test_config_checks():
    with pytest.raises(ConfigError, match="num_async"):
        IMPALA({"num_async": 0})


@pytest.mark.cluster
def test_smoke_with_the_learner_in_the_driver(engine):
    algo = IMPALA(IN_DRIVER, engine=engine)
    initial = algo.policy.get_weights()
    decoded = batches_decoded()
    try:
        first, second = algo.train(), algo.train()
        assert batches_decoded() > decoded  # every batch passes through the driver here
        assert second["iteration"] == 2
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 128
        # A queue of one batch keeps sampling at most a few batches ahead of learning.
        assert second["env_steps_trained"] > 0 and second["info"]["learner_steps"] >= 1
        for key in ("episode_return_mean", "episode_len_mean", "time_s", "engine"):
            assert key in second
        assert {"loss_policy", "mean_rho", "learner_queue_size"} <= set(second["info"])
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
        algo.learner.stop()
        # The workers whose batches the learner used get its new weights with
        # their next sample call; the others (a worker whose fragments all came
        # after the learner's last step) may still hold the first weights.
        algo.workers.engine.wait(algo.workers.sample(), timeout=30)
        remote = algo.workers.foreach_worker(lambda w: w.get_weights(), local=False)
        changed = [w for w in remote if any(not np.array_equal(w[k], initial[k]) for k in initial)]
        assert changed, "no worker received the learner's weights"
    finally:
        algo.stop()
    assert not algo.learner.is_alive()


@pytest.mark.cluster
@pytest.mark.timeout(60)
def test_learner_failure_surfaces_in_train(engine):
    algo = IMPALA(IN_DRIVER, engine=engine)
    try:

        def broken(batch):
            raise ValueError("boom in the learner")

        algo.policy.learn_on_batch = broken
        with pytest.raises(LearnerError, match="boom in the learner") as info:
            for _ in range(5):
                algo.train()
        assert isinstance(info.value.__cause__, ValueError)
    finally:
        algo.stop()
    assert not algo.learner.is_alive()


@pytest.mark.cluster
def test_save_and_restore(engine, tmp_path):
    first = IMPALA(TINY, engine=engine)
    try:
        first.train(), first.train()
        path = first.save(tmp_path / "impala.hrl")
    finally:
        first.stop()
    saved = read_checkpoint(path)
    second = IMPALA(TINY, engine=engine)
    try:
        second.restore(path)
        restored = second.get_state()
        assert restored["iteration"] == 2
        assert restored["flow"]["counters"] == saved["flow"]["counters"]
        for name, value in saved["policy"]["weights"].items():
            np.testing.assert_array_equal(restored["policy"]["weights"][name], value)
        assert restored["policy"]["num_grad_updates"] == saved["policy"]["num_grad_updates"] > 0
        result = second.train()
        assert result["iteration"] == 3
        assert result["env_steps_sampled"] > saved["flow"]["counters"]["env_steps_sampled"]
    finally:
        second.stop()


def batches_decoded_by_process(engine) -> dict:
    return {"driver": batches_decoded(), **engine.client.run(batches_decoded)}


@pytest.mark.cluster
def test_the_learner_in_a_process_of_its_own_trains_and_no_batch_passes_through_the_driver(
    engine,
):
    before = batches_decoded_by_process(engine)
    algo = IMPALA(APART, engine=engine)
    initial = algo.policy.get_weights()
    try:
        first, second = algo.train(), algo.train()
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 128
        assert second["env_steps_trained"] > 0 and second["info"]["learner_steps"] >= 1
        assert {"loss_policy", "mean_rho", "learner_queue_size"} <= set(second["info"])
        after = batches_decoded_by_process(engine)
        learner = algo.workers.learner_group.handle.address
        assert after["driver"] == before["driver"], "a sample batch was decoded in the driver"
        assert after[learner] > before[learner]  # fetched from the rollout workers
        # The learner's weights reach the rollout workers by reference.
        algo.workers.engine.wait(algo.workers.sample(), timeout=30)
        remote = algo.workers.foreach_worker(lambda w: w.get_weights(), local=False)
        changed = [w for w in remote if any(not np.array_equal(w[k], initial[k]) for k in initial)]
        assert changed, "no worker received the learner's weights"
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
        learned = algo.policy.get_weights()  # evaluate pulled the learner's
        assert any(not np.array_equal(learned[k], initial[k]) for k in initial)
    finally:
        algo.stop()


@pytest.mark.cluster
def test_save_and_restore_with_the_learner_in_a_process(engine, tmp_path):
    first = IMPALA(APART, engine=engine)
    try:
        first.train(), first.train()
        path = first.save(tmp_path / "impala.hrl")
    finally:
        first.stop()
    saved = read_checkpoint(path)
    assert saved["policy"]["num_grad_updates"] > 0  # the learner's state, pulled
    second = IMPALA(APART, engine=engine)
    try:
        second.restore(path)
        pushed = second.workers.learner_group.handle.call("policy_state", direct=True).result()
        for name, value in saved["policy"]["weights"].items():
            np.testing.assert_array_equal(pushed["weights"][name], value)
        assert second.train()["iteration"] == 3
    finally:
        second.stop()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_killed_learner_process_is_made_again_from_its_last_state_and_the_run_goes_on():
    with hrl.Engine.local(n_workers=3, threads_per_worker=1) as engine:
        algo = IMPALA({**APART, "min_steps_per_report": 512}, engine=engine)
        try:
            algo.train()
            learner = algo.workers.learner_group
            learner.pull_state()  # the state it is made again from
            kept = algo.policy.get_state()["num_grad_updates"]
            os.kill(engine.client.run(os.getpid)[learner.handle.address], signal.SIGKILL)
            results = [algo.train() for _ in range(3)]
            assert learner.handle.restarts == 1
            assert results[-1]["env_steps_trained"] > 0
            state = learner.handle.call("policy_state", direct=True).result()
            assert state["num_grad_updates"] > kept  # went on from there
        finally:
            algo.stop()
