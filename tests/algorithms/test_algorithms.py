"""Every algorithm on a real cluster with real gymnasium envs: smoke, checkpoints, learning."""

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import A2C, A3C, DQN, PPO, SAC, TD3, ApeX, Rainbow

pytestmark = pytest.mark.cluster

TINY = {"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 3}


SMALL_REPLAY = {"learning_starts": 64, "min_steps_per_report": 64, "hidden": (32, 32),
                "train_batch_size": 32, "training_intensity": 16.0}  # fmt: skip


@pytest.mark.parametrize(
    "algo_cls, extra",
    [
        (PPO, {"train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}),
        (A2C, {"train_batch_size": 64}),
        (A3C, {"min_steps_per_report": 64}),
        (
            DQN,
            {
                "learning_starts": 64,
                "train_steps_per_round": 2,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
            },
        ),
        (
            DQN,
            {
                "learning_starts": 64,
                "train_steps_per_round": 2,
                "min_steps_per_report": 64,
                "prioritized_replay": True,
                "n_step": 3,
                "hidden": (32, 32),
            },
        ),
        (
            ApeX,
            {
                "learning_starts": 64,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
                "num_replay_shards": 2,
                "train_batch_size": 32,
            },
        ),
        (
            ApeX,
            {
                "learning_starts": 64,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
                "train_batch_size": 32,
                "replay_batches_per_call": 2,
                "training_intensity": 1.0,
            },
        ),
        (
            Rainbow,
            {
                "learning_starts": 64,
                "train_steps_per_round": 2,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
                "num_atoms": 11,
            },
        ),
        (
            ApeX,  # distributed Rainbow: the same keys
            {
                "learning_starts": 64,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
                "train_batch_size": 32,
                "num_atoms": 11,
                "v_min": 0.0,
                "v_max": 100.0,
                "noisy": True,
            },
        ),
        (SAC, {"env": "Pendulum-v1", **SMALL_REPLAY}),
        (SAC, {**SMALL_REPLAY, "env": "CartPole-v1", "prioritized_replay": True, "n_step": 2}),
        (TD3, {"env": "Pendulum-v1", **SMALL_REPLAY}),
        (
            SAC,
            {
                "env": "Pendulum-v1",
                **SMALL_REPLAY,
                "num_replay_shards": 2,  # distributed
                "replay_batches_per_call": 2,
                "normalize_observations": True,
            },
        ),
    ],
)
def test_smoke(engine, algo_cls, extra):
    algo = algo_cls({**TINY, **extra}, engine=engine)
    try:
        first, second = algo.train(), algo.train()
        assert second["iteration"] == 2
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 64
        for key in ("episode_return_mean", "episode_len_mean", "time_s", "engine", "info"):
            assert key in second
        # Ape-X's learner trains beside the sampling: on a loaded machine its first steps
        # may come after the first reports.
        later = second
        while later["env_steps_trained"] == 0 and later["iteration"] < 30:
            later = algo.train()
        assert later["env_steps_trained"] > 0
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
    finally:
        algo.stop()


def test_ppo_continuous_actions_on_pendulum(engine):
    algo = PPO(
        {**TINY, "env": "Pendulum-v1", "train_batch_size": 64, "minibatch_size": 32}, engine=engine
    )
    try:
        result = algo.train()
        assert result["env_steps_sampled"] >= 64
        assert result["info"] and all(np.isfinite(v) for v in result["info"].values())
    finally:
        algo.stop()


def train_inside_a_task(
    iterations: int, algorithm: str = "ppo", env: str = "CartPole-v1", **settings
) -> dict:
    """An algorithm trained in a task on the cluster that runs the task; times of train
    and stop."""
    import time

    start = time.perf_counter()
    config = settings if algorithm in ("alphazero", "mpc") else {**TINY, **settings}
    algo, result = hrl_tasks.train(
        algorithm, env, stop={"iteration": iterations}, engine=hrl_tasks.current_engine(),
        **config,
    )  # fmt: skip
    trained = time.perf_counter()
    algo.stop()
    return {"iteration": result["iteration"], "train_s": trained - start,
            "stop_s": time.perf_counter() - trained}  # fmt: skip


IN_A_TASK = {
    "ppo": {},
    "a2c": {"train_batch_size": 32},
    "a3c": {"min_steps_per_report": 32},
    "dqn": {"learning_starts": 32, "train_steps_per_round": 2, "min_steps_per_report": 32},
    "apex": {"learning_starts": 32, "min_steps_per_report": 32, "train_batch_size": 16},
    "sac": {"env": "Pendulum-v1", "learning_starts": 32, "min_steps_per_report": 32,
            "train_batch_size": 16, "training_intensity": 8.0},
    "td3": {"env": "Pendulum-v1", "learning_starts": 32, "min_steps_per_report": 32,
            "train_batch_size": 16, "training_intensity": 8.0},
    "impala": {"train_batch_size": 32, "min_steps_per_report": 32},
    "appo": {"train_batch_size": 32, "min_steps_per_report": 32},
    "es": {"num_perturbations": 2, "max_episode_steps": 50},
    "alphazero": {"env": "tictactoe_v3", "games_per_iteration": 2, "simulations": 16,
                  "evaluation_interval": 1, "evaluation_games": 2,
                  "updates_per_iteration": 2, "min_buffer_size": 8},
    "mpc": {"env": "Pendulum-v1", "hidden": (32, 32), "ensemble_size": 3, "random_steps": 60,
            "steps_per_iteration": 6, "updates_per_iteration": 20},
}  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", sorted(IN_A_TASK))
def test_an_algorithm_trains_inside_a_task_and_stops_promptly(engine, algorithm):
    settings = dict(IN_A_TASK[algorithm], num_workers=1)
    found = engine.submit(train_inside_a_task, 2, algorithm, **settings).result(timeout=100)
    assert found["iteration"] == 2
    # A kill that waited for its timeout (30 s) would mean a rollout worker never ended;
    # a clean stop takes well under a second.
    assert found["stop_s"] < 10.0


@pytest.mark.timeout(120)
def test_rollout_workers_hold_their_resources_where_they_are_declared():
    # One of two worker processes declares a custom resource (no GPU here): every
    # rollout worker asking for it lands there, and the ledger counts what they hold.
    declared = [{"CPU": 1, "sampler": 2}, {"CPU": 1}]
    with hrl_tasks.Engine.local(resources=declared, threads_per_worker=1) as engine:
        algo = PPO(dict(TINY, rollout_worker_resources={"sampler": 1}), engine=engine)
        try:
            algo.train()
            addresses = {h.address for h in algo.workers.remote_workers}
            workers = engine.resources()
            (special,) = [a for a, res in workers.items() if "sampler" in res["declared"]]
            assert addresses == {special}
            assert workers[special]["held_by_objects"] == {"sampler": 2.0}
            assert workers[special]["available"]["sampler"] == 0
        finally:
            algo.stop()
        with pytest.raises(hrl_tasks.ResourceError, match="GPU"):
            PPO(dict(TINY, rollout_worker_resources={"GPU": 1}), engine=engine)


def test_unknown_env_fails_before_any_cluster_starts():
    with pytest.raises(ValueError, match="CartPole-v1"):
        PPO({"env": "CartPol-v1"})


@pytest.mark.timeout(240)
def test_ppo_learns_cartpole(engine):
    """The one real learning check in CI: PPO reaches a mean return of 150 with a fixed seed."""
    algo, result = hrl_tasks.train(
        "ppo",
        env="CartPole-v1",
        engine=engine,
        stop={"episode_return_mean": 150, "env_steps_sampled": 60_000},
        num_workers=2,
        seed=1,
    )
    algo.stop()
    assert result["episode_return_mean"] >= 150, result


@pytest.mark.parametrize("name, extra", [
    ("ppo", {"train_batch_size": 64, "minibatch_size": 32}),
    ("sac", SMALL_REPLAY),
])  # fmt: skip
def test_observation_statistics_go_from_the_workers_to_the_learner_and_back_and_are_saved(
    engine, tmp_path, name, extra
):
    algo = hrl_tasks.algorithms.get_algorithm(name)(
        {**TINY, **extra, "env": "Pendulum-v1", "normalize_observations": True}, engine=engine
    )
    try:
        algo.train()
        result = algo.train()
        algo.workers.sync_weights()
        learner = algo.policy.get_weights()
        # Every observation sampled so far is in the learner's statistics (one round may
        # still be on its way: SAC merges a round's before it replays)
        sampled = result["env_steps_sampled"]
        assert sampled - 64 <= learner["obs_normalizer.count"] <= sampled
        assert np.all(learner["obs_normalizer.var"] != 1.0)  # Pendulum's are not unit
        for handle in algo.workers.remote_workers:
            remote = handle.call("get_weights").result(timeout=30)
            np.testing.assert_array_equal(
                remote["obs_normalizer.mean"], learner["obs_normalizer.mean"]
            )
        path = algo.save(tmp_path / "checkpoint.hrl")
        loaded = hrl_tasks.load(path)
        observation = np.array([0.5, -0.5, 3.0], np.float32)
        np.testing.assert_allclose(loaded.compute_single_action(observation),
                                   algo.compute_single_action(observation), atol=1e-6)  # fmt: skip
    finally:
        algo.stop()


@pytest.mark.timeout(180)
def test_apex_replays_the_ratio_it_is_given_whatever_its_workers_pace(engine):
    # Left alone its learner replays about 1.5 rows per sampled step here; held to 0.5,
    # the samplers wait for it.
    algo = ApeX({**TINY, "learning_starts": 64, "min_steps_per_report": 500, "hidden": (32, 32),
                 "train_batch_size": 32, "replay_batches_per_call": 2,
                 "training_intensity": 0.5}, engine=engine)  # fmt: skip
    try:
        result = algo.train()
        while result["env_steps_sampled"] < 3000:
            result = algo.train()
        ratio = algo.limiter.ratio
        assert abs(ratio.sampled - 0.5 * (ratio.inserted - 64)) <= ratio.error_buffer
        trained, sampled = result["env_steps_trained"], result["env_steps_sampled"]
        assert 0.35 < trained / sampled < 0.65, result
    finally:
        algo.stop()


@pytest.mark.timeout(120)
def test_apex_on_its_own_cluster_keeps_each_replay_shard_in_a_process_of_its_own():
    # A rollout worker's death then loses no replay (the shards are spread after them);
    # the learner (num_learners=1) has a process of its own too.
    algo = ApeX({**TINY, "learning_starts": 64, "min_steps_per_report": 64, "hidden": (32, 32),
                 "train_batch_size": 32})  # fmt: skip
    try:
        assert algo.train()["env_steps_sampled"] >= 64
        samplers = {h.address for h in algo.workers.remote_workers}
        shards = [h.address for h in algo.shards]
        learner = algo.workers.learner_group.handle.address
        assert len(algo.engine.client.scheduler_info()["workers"]) == 5
        assert len(samplers) == 2 and len(set(shards)) == 2 and not samplers & set(shards)
        assert learner not in samplers | set(shards)
    finally:
        algo.stop()


@pytest.mark.timeout(180)
def test_sac_with_replay_shards_holds_its_ratio_and_explores_uniformly_until_learning(engine):
    algo = SAC({**TINY, **SMALL_REPLAY, "env": "Pendulum-v1", "num_replay_shards": 2,
                "replay_batches_per_call": 2, "learning_starts": 256, "training_intensity": 2.0,
                "min_steps_per_report": 256}, engine=engine)  # fmt: skip
    try:
        assert all(h.call("apply", uniform_flag).result(timeout=30)
                   for h in algo.workers.remote_workers)  # fmt: skip
        result = algo.train()
        while result["env_steps_sampled"] < 2000:
            result = algo.train()
        assert not any(h.call("apply", uniform_flag).result(timeout=30)
                       for h in algo.workers.remote_workers)  # fmt: skip
        ratio = algo.limiter.ratio
        assert abs(ratio.sampled - 2.0 * (ratio.inserted - 256)) <= ratio.error_buffer
        assert result["env_steps_trained"] > 0 and result["info"]["alpha"] < 1.0
    finally:
        algo.stop()


def uniform_flag(worker):
    return worker.policy.uniform_actions
