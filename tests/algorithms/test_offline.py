"""Recording experience from a run, and learning from it offline (BC, MARWIL, IQL)."""

import os
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import BC, IQL, MARWIL, PPO, ConfigError

pytest.importorskip("pyarrow")

from hrl_tasks.data.experience import (  # noqa: E402
    EpisodeRecorder,
    PartWriter,
    experience_files,
    read_experience,
    read_file,
)

pytestmark = pytest.mark.cluster


def all_rows(directory):
    parts = [read_file(path) for path in experience_files(directory)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_a_recorded_run_holds_every_sampled_step_in_whole_episodes(tmp_path):
    directory = tmp_path / "recorded"
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = PPO({"num_workers": 2, "train_batch_size": 256, "seed": 0,
                    "record_experience": str(directory)}, engine=engine)  # fmt: skip
        try:
            for _ in range(3):
                result = algo.train()
        finally:
            algo.stop()  # the workers write what they still hold
    rows = all_rows(directory)
    assert len(rows["rewards"]) >= result["env_steps_sampled"] >= 768
    assert (rows["rewards"] == 1.0).all() and rows["obs"].shape[1:] == (4,)
    assert rows["obs"].dtype == np.float32 and rows["actions"].dtype == np.int64
    steps = set(zip(rows["eps_id"].tolist(), rows["t"].tolist(), strict=True))
    assert len(steps) == len(rows["rewards"])  # each step once
    for eps in np.unique(rows["eps_id"]):
        mine = rows["eps_id"] == eps
        t, ended = rows["t"][mine], rows["terminateds"][mine] | rows["truncateds"][mine]
        np.testing.assert_array_equal(t, np.arange(len(t)) + t[0])
        assert ended[-1] and not ended[:-1].any()
        if t[0] == 0 and rows["terminateds"][mine][-1]:  # a whole episode: its return
            assert rows["returns_to_go"][mine][0] == len(t)
    assert np.isfinite(rows["logp"]).all()
    frame = read_experience(directory)  # and as Dask data
    assert len(frame) == len(rows["rewards"]) and "returns_to_go" in frame.columns


def test_a_multi_agent_run_records_each_agents_trajectory_under_its_policy(tmp_path):
    directory = tmp_path / "recorded"
    config = {"env": "tictactoe_v3", "num_workers": 1, "num_envs_per_worker": 2,
              "rollout_fragment_length": 16, "train_batch_size": 64, "minibatch_size": 32,
              "num_sgd_iter": 1, "seed": 0, "record_experience": str(directory),
              "policies": {"crosses": None, "noughts": None},
              "policy_mapping_fn": lambda agent, episode: (
                  "crosses" if agent == "player_1" else "noughts")}  # fmt: skip
    with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        algo = PPO(config, engine=engine)
        try:
            for _ in range(2):
                algo.train()
        finally:
            algo.stop()
    for policy, agent in (("crosses", "player_1"), ("noughts", "player_2")):
        rows = all_rows(directory / f"*-{policy}-*.parquet")  # one policy's files
        assert set(rows["policy_id"]) == {policy} and set(rows["agent_id"]) == {agent}
        assert (
            rows["obs"].shape[1:] == rows["next_obs"].shape[1:] and np.isfinite(rows["logp"]).all()
        )
        for eps in np.unique(rows["eps_id"]):  # its own steps, whole, in order
            mine = rows["eps_id"] == eps
            np.testing.assert_array_equal(rows["t"][mine], np.arange(mine.sum()))
            ended = rows["terminateds"][mine] | rows["truncateds"][mine]
            assert ended[-1] and not ended[:-1].any()
            np.testing.assert_allclose(rows["returns_to_go"][mine],
                                       np.cumsum(rows["rewards"][mine][::-1])[::-1])  # fmt: skip
    crosses, noughts = (all_rows(directory / f"*-{p}-*.parquet") for p in ("crosses", "noughts"))
    shared = set(crosses["eps_id"]) & set(noughts["eps_id"])
    assert shared, "the two players' trajectories of one game share its eps_id"
    every = all_rows(directory)
    assert len(every["rewards"]) == len(crosses["rewards"]) + len(noughts["rewards"])


def balancing_policy(obs):
    """A controller that keeps CartPole up: push toward where the pole falls."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def write_demonstrations(directory, episodes, seed, random_share=0.0):
    """CartPole episodes of the controller (each step random with ``random_share``),
    written as a user's own code would, in the documented schema."""
    env, rng = gym.make("CartPole-v1"), np.random.default_rng(seed)
    writer, recorder = (
        PartWriter(str(directory), "demo", {"env": "CartPole-v1"}, 4000),
        EpisodeRecorder(),
    )
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        steps, done = [], False
        while not done:
            controller = balancing_policy(obs)
            action = int(rng.integers(2)) if rng.random() < random_share else controller
            logp = np.log((1 - random_share) * (action == controller) + random_share / 2)
            nxt, reward, terminated, truncated, _ = env.step(action)
            steps.append((obs, action, reward, terminated, truncated, nxt, logp))
            obs, done = nxt, terminated or truncated
        columns = {
            "obs": np.array([s[0] for s in steps], np.float32)[:, None],
            "actions": np.array([s[1] for s in steps])[:, None],
            "rewards": np.array([s[2] for s in steps], np.float32)[:, None],
            "terminateds": np.array([s[3] for s in steps])[:, None],
            "truncateds": np.array([s[4] for s in steps])[:, None],
            "next_obs": np.array([s[5] for s in steps], np.float32)[:, None],
            "logp": np.array([s[6] for s in steps], np.float32)[:, None],
            "eps_id": np.full((len(steps), 1), episode),
            "t": np.arange(len(steps))[:, None],
        }
        writer.add(recorder.add(columns))
    writer.flush()
    return directory


def test_bc_learns_to_balance_from_a_controllers_demonstrations(tmp_path):
    data = write_demonstrations(tmp_path / "demos", episodes=40, seed=0)
    with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        algo = BC({"experience_input": str(data), "seed": 0, "updates_per_iteration": 100,
                   "lr": 1e-3, "evaluation_episodes": 5, "evaluation_interval": 2},
                  engine=engine)  # fmt: skip
        try:
            results = [algo.train() for _ in range(4)]
        finally:
            algo.stop()
    # evaluated after iterations 2 and 4: the last 10 episodes are the two evaluations'
    assert results[-1]["episode_return_mean"] >= 400, [r["episode_return_mean"] for r in results]
    assert results[-1]["env_steps_trained"] == 4 * 100 * 512
    assert results[-1]["info"]["loss_policy"] < results[0]["info"]["loss_policy"]


def test_marwil_learns_from_mixed_demonstrations_and_checkpoints(tmp_path):
    data = write_demonstrations(tmp_path / "mixed", episodes=30, seed=1, random_share=0.3)
    with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        algo = MARWIL({"experience_input": str(data), "seed": 0, "updates_per_iteration": 50,
                       "lr": 1e-3, "evaluation_episodes": 2,
                       "off_policy_estimators": ["is", "wis", "dr"]}, engine=engine)  # fmt: skip
        try:
            algo.train()
            second = algo.train()
            path = algo.save(tmp_path / "marwil.hrl")
        finally:
            algo.stop()
    assert np.isfinite(second["info"]["loss_value"]) and second["info"]["advantage_norm"] > 0
    assert second["iteration"] == 2 and np.isfinite(second["episode_return_mean"])
    for name in ("is", "wis", "dr"):  # the learned policy's return, estimated
        assert np.isfinite(second["info"][f"estimate/{name}"]), second["info"]
    loaded = hrl_tasks.load(path)
    action = loaded.compute_single_action(np.zeros(4, np.float32))
    assert action in (0, 1)


def test_iql_learns_from_mixed_demonstrations_estimates_itself_and_checkpoints(tmp_path):
    data = write_demonstrations(tmp_path / "mixed", episodes=30, seed=1, random_share=0.3)
    with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        algo = IQL({"experience_input": str(data), "seed": 0, "updates_per_iteration": 150,
                    "hidden": (64, 64), "lr": 1e-3, "evaluation_episodes": 5,
                    "off_policy_estimators": ["is", "wis", "dr"]}, engine=engine)  # fmt: skip
        try:
            results = [algo.train() for _ in range(3)]
            path = algo.save(tmp_path / "iql.hrl")
        finally:
            algo.stop()
    # 30% of the recorded actions are random: imitating all of them alike would fall over
    assert results[-1]["episode_return_mean"] >= 400, [r["episode_return_mean"] for r in results]
    info = results[-1]["info"]
    assert info["weight_mean"] > 0 and np.isfinite(info["loss_value"]), info
    for name in ("is", "wis", "dr"):  # the learned policy's return, estimated
        assert np.isfinite(info[f"estimate/{name}"]), info
    loaded = hrl_tasks.load(path)
    assert loaded.compute_single_action(np.zeros(4, np.float32)) in (0, 1)


def iql_after_a_kill(data, kill: bool):
    """IQL's learned weights, last result and the engine's stats after 3 iterations
    reading ``data`` on two worker processes; with ``kill``, one of them killed
    (SIGKILL) after the first iteration, while the reads it had been given were kept
    there or running."""
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = IQL({"experience_input": str(data), "seed": 0, "updates_per_iteration": 40,
                    "hidden": (32, 32), "evaluation_interval": 0, "num_workers": 2,
                    "learner_threads": 1, "shuffle_window": 2}, engine=engine)  # fmt: skip
        try:
            algo.train()
            if kill:
                pids = engine.client.run(os.getpid)
                os.kill(sorted(pids.values())[0], signal.SIGKILL)
            results = [algo.train() for _ in range(2)]
        finally:
            weights = algo.workers.learner.get_weights()
            algo.stop()
        return weights, results[-1], engine.stats()


def test_a_reading_worker_killed_mid_run_costs_only_time(tmp_path):
    data = write_demonstrations(tmp_path / "demos", episodes=24, seed=2, random_share=0.3)
    calm, calm_result, calm_stats = iql_after_a_kill(data, kill=False)
    killed, killed_result, killed_stats = iql_after_a_kill(data, kill=True)
    assert calm_stats["workers_lost"] == 0 and killed_stats["workers_lost"] == 1
    # what the worker held was read again: the same rows in the same order, so the same
    # weights as the calm run's
    assert killed_stats["recomputed"] + killed_stats["retried"] >= 1, killed_stats
    assert killed_result["env_steps_trained"] == calm_result["env_steps_trained"] == 3 * 40 * 256
    assert killed_result["experience_rows_read"] == calm_result["experience_rows_read"]
    for name, value in calm.items():
        np.testing.assert_array_equal(killed[name], value, err_msg=name)


def test_the_estimates_cover_box_actions_doubly_robust_included(tmp_path):
    env, rng = gym.make("Pendulum-v1"), np.random.default_rng(0)
    writer, recorder = (
        PartWriter(str(tmp_path / "uniform"), "demo", {"env": "Pendulum-v1"}),
        EpisodeRecorder(),
    )
    for episode in range(6):  # uniformly random torques: log-density -log(4)
        obs, _ = env.reset(seed=episode)
        rows = {
            k: [] for k in ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
        }
        done = False
        while not done:
            action = rng.uniform(-2, 2, size=1).astype(np.float32)
            nxt, reward, terminated, truncated, _ = env.step(action)
            for k, v in zip(rows, (obs, action, reward, terminated, truncated, nxt), strict=True):
                rows[k].append(v)
            obs, done = nxt, terminated or truncated
        columns = {k: np.array(v)[:, None] for k, v in rows.items()}
        columns["obs"], columns["next_obs"] = (
            columns[k].astype(np.float32) for k in ("obs", "next_obs")
        )
        columns["rewards"] = columns["rewards"].astype(np.float32)
        steps = len(rows["rewards"])
        columns.update(logp=np.full((steps, 1), -np.log(4.0), np.float32),
                       eps_id=np.full((steps, 1), episode), t=np.arange(steps)[:, None])  # fmt: skip
        writer.add(recorder.add(columns))
    writer.flush()
    with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        algo = BC({"experience_input": str(tmp_path / "uniform"), "seed": 0, "env": "Pendulum-v1",
                   "updates_per_iteration": 20, "evaluation_episodes": 1,
                   "off_policy_estimators": ["is", "wis", "dr"]}, engine=engine)  # fmt: skip
        try:
            result = algo.train()
        finally:
            algo.stop()
    for name in ("is", "wis", "dr"):
        assert np.isfinite(result["info"][f"estimate/{name}"]), result["info"]


def test_offline_keys_are_refused_clearly():
    with pytest.raises(ConfigError, match="experience_input is required") as missing:
        BC({})
    assert "\n" not in str(missing.value)
    with pytest.raises(ConfigError, match="beta must be 0"):
        BC({"experience_input": "x", "beta": 1.0})


@pytest.fixture
def s3_endpoint(tmp_path):
    """A local S3 (moto's server) on a free port, with one bucket, and the environment
    that points boto at it."""
    import socket
    import time

    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto's S3 server did not start"
                time.sleep(0.2)
        import s3fs

        s3fs.S3FileSystem(key="test", secret="test", endpoint_url=env["AWS_ENDPOINT_URL"]).mkdir(
            "experience"
        )
        yield env
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_a_worker_records_to_s3_and_bc_trains_from_it_on_the_command_line(
    s3_endpoint, tmp_path, monkeypatch
):
    """A rollout worker writes to S3 (as every worker of a run does), then the command
    line learns from it there (local paths: the tests above)."""
    import os

    from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
    from hrl_tasks.rollout import RolloutWorker

    for key, value in s3_endpoint.items():
        monkeypatch.setenv(key, value)
    space = gym.make("CartPole-v1")
    policy = PPOPolicy(space.observation_space, space.action_space, PPOPolicyConfig(seed=0))
    worker = RolloutWorker("CartPole-v1", policy.inference_copy(), num_envs=2, seed=0,
                           record_experience="s3://experience/cartpole", single_thread=False)  # fmt: skip
    for _ in range(4):
        worker.sample()
    worker.close()
    assert experience_files("s3://experience/cartpole")
    cloned = subprocess.run(
        [sys.executable, "-m", "hrl_tasks.cli", "train", "bc", "--train-from",
         "s3://experience/cartpole", "--stop-iters", "1", "--no-progress",
         "--set", "updates_per_iteration=5", "--out", str(tmp_path / "bc")],
        capture_output=True, text=True, timeout=150, cwd=tmp_path,
        env={**os.environ, **s3_endpoint},
    )  # fmt: skip
    assert cloned.returncode == 0, cloned.stderr[-3000:]
    assert "iter=1" in cloned.stdout


def test_dqn_replays_recorded_rows_beside_its_own_and_refuses_what_cannot_mix(tmp_path):
    from hrl_tasks.algorithms import DQN, DQNConfig

    data = write_demonstrations(tmp_path / "demos", episodes=5, seed=2)
    config = {"experience_input": str(data), "experience_mix": 0.25, "seed": 0,
              "learning_starts": 64, "train_batch_size": 32, "min_steps_per_report": 256,
              "hidden": (32, 32), "num_workers": 1}  # fmt: skip
    with hrl_tasks.SyncEngine() as engine:
        algo = DQN(config, engine=engine)
        try:
            result = algo.train()
        finally:
            algo.stop()
    trained = result["env_steps_trained"]
    assert trained > 0 and result["experience_rows_read"] >= trained // 4
    with pytest.raises(ConfigError, match="prioritized_replay must be False with experience_in"):
        DQNConfig.from_dict({**config, "prioritized_replay": True})
    with pytest.raises(ConfigError, match="n_step must be 1 with experience_input"):
        DQNConfig.from_dict({**config, "n_step": 3})
