"""Ape-X with the driver's learner, and with a learner process of its own."""

import os
import signal

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.algorithms import ApeX
from hrl_tasks.algorithms.algorithm import read_checkpoint
from hrl_tasks.algorithms.apex.learner import ReplayLearner
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.data import SampleBatch
from hrl_tasks.data.sample_batch import batches_decoded
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig
from tests.policies.synthetic import cartpole_spaces

TINY = {
    "num_workers": 2,
    "num_envs_per_worker": 2,
    "rollout_fragment_length": 16,
    "num_replay_shards": 1,
    "buffer_size": 5000,
    "learning_starts": 200,
    "train_batch_size": 32,
    "replay_batches_per_call": 4,
    "weight_sync_every": 2,
    "target_update_every": 4,
    "min_steps_per_report": 256,
    "hidden": (16, 16),
    "seed": 2,
}
APART = {**TINY, "num_learners": 1}  # the default
IN_DRIVER = {**TINY, "num_learners": 0}


def test_config_refuses_a_learner_group_and_a_learner_without_direct_calls():
    with pytest.raises(ConfigError, match="num_learners must be 0 .* or 1"):
        ApeX.config_class.from_dict({"num_learners": 2})
    with pytest.raises(ConfigError, match="direct_calls must be True with num_learners=1"):
        ApeX.config_class.from_dict({"direct_calls": False})  # num_learners=1 by default


def test_the_replay_learner_updates_per_batch_moves_its_target_and_gives_priorities():
    spaces = cartpole_spaces()
    config = DQNPolicyConfig(hidden=(8,), seed=0)
    learner = ReplayLearner(
        DQNPolicy, *spaces, config, train_batch_size=4, target_update_every=2, broadcast_interval=3
    )
    rng = np.random.default_rng(0)
    rows = 10  # two updates of 4 rows and one of 2
    group = SampleBatch(
        {
            "obs": rng.normal(size=(rows, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, rows),
            "rewards": np.ones(rows, np.float32),
            "next_obs": rng.normal(size=(rows, 4)).astype(np.float32),
            "terminateds": np.zeros(rows, bool),
            "truncateds": np.zeros(rows, bool),
            "weights": np.ones(rows, np.float32),
            "batch_indexes": np.arange(100, 100 + rows),
        }
    )
    first = learner.learn(group)
    assert (first["trained"], first["updates"], first["target_updates"]) == (10, 3, 1)
    np.testing.assert_array_equal(first["indexes"], np.arange(100, 110))
    assert first["priorities"].shape == (10,) and np.all(first["priorities"] > 0)
    assert "weights" in first  # 3 updates: one broadcast interval
    second = learner.learn(None)  # the shard had too few rows yet
    assert second["trained"] == 0 and "indexes" not in second and "weights" not in second
    assert learner.learn(group)["version"] == 6


def batches_decoded_by_process(engine) -> dict:
    return {"driver": batches_decoded(), **engine.client.run(batches_decoded)}


@pytest.mark.cluster
def test_the_driver_learns_with_num_learners_0(engine):
    algo = ApeX(IN_DRIVER, engine=engine)
    decoded = batches_decoded()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["env_steps_trained"] > 0
        assert algo.workers.learner_group is None
        assert batches_decoded() > decoded  # the replayed groups pass through the driver
        assert algo.workers.local_worker.policy.get_state()["num_grad_updates"] > 0
    finally:
        algo.stop()


@pytest.mark.cluster
def test_the_learner_apart_replays_and_no_batch_passes_through_the_driver(engine):
    before = batches_decoded_by_process(engine)
    algo = ApeX(APART, engine=engine)
    initial = algo.workers.local_worker.policy.get_weights()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["env_steps_trained"] > 0
        assert results[-1]["env_steps_sampled"] > results[0]["env_steps_sampled"]
        assert "loss_td" in results[-1]["info"] or "q_mean" in results[-1]["info"]
        after = batches_decoded_by_process(engine)
        learner = algo.workers.learner_group.handle
        shard = algo.shards[0].address
        assert after["driver"] == before["driver"], "a sample batch was decoded in the driver"
        assert after[learner.address] > before[learner.address]  # fetched from the shard
        assert after[shard] > before[shard]  # fetched from the rollout workers
        state = learner.call("policy_state", direct=True).result()
        assert state["num_grad_updates"] >= results[-1]["info"]["learner_steps"] > 0
        # The learner's weights reach the rollout workers with their next sample call.
        algo.workers.engine.wait(algo.workers.sample(), timeout=30)
        remote = algo.workers.foreach_worker(lambda w: w.get_weights(), local=False)
        assert all(any(not np.array_equal(w[k], initial[k]) for k in initial) for w in remote)
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
    finally:
        algo.stop()


@pytest.mark.cluster
def test_save_and_restore_with_the_learner_apart(engine, tmp_path):
    first = ApeX(APART, engine=engine)
    try:
        first.train(), first.train()
        path = first.save(tmp_path / "apex.hrl")
    finally:
        first.stop()
    saved = read_checkpoint(path)
    assert saved["policy"]["num_grad_updates"] > 0  # the learner's state, pulled
    second = ApeX(APART, engine=engine)
    try:
        second.restore(path)
        pushed = second.workers.learner_group.handle.call("policy_state", direct=True).result()
        assert pushed["num_grad_updates"] == saved["policy"]["num_grad_updates"]
        assert second.train()["iteration"] == 3
    finally:
        second.stop()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_killed_learner_is_made_again_from_its_last_state_and_the_run_goes_on():
    with hrl.Engine.local(n_workers=4, threads_per_worker=1) as engine:
        algo = ApeX(APART, engine=engine)
        try:
            algo.train(), algo.train()
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
