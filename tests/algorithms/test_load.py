"""hrl_tasks.load: any algorithm's checkpoint acts again with no cluster, or trains on."""

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import ALGORITHMS, load
from hrl_tasks.algorithms.checkpoint import CheckpointError

pytestmark = pytest.mark.timeout(120)

GYM_ALGORITHMS = sorted(
    set(ALGORITHMS) - {"alphazero", "mpc", "composition", "td3"}
)  # games, plans, agents; TD3 acts in Box action spaces only


# One iteration of the replay learners' defaults is 1,000 env steps of (256, 256) updates.
SMALL = {
    name: {"min_steps_per_report": 64, "learning_starts": 32, "train_batch_size": 32,
           "hidden": (32, 32)}
    for name in ("sac", "td3")
}  # fmt: skip


OFFLINE = {"bc", "marwil", "cql", "iql"}
"""Learn from a recording (`recording`), not from rollout workers."""


def recording(env: str, directory) -> str:
    """A few episodes of random actions in ``env``, written as a recording."""
    import gymnasium as gym

    from hrl_tasks.data.experience import EpisodeRecorder, PartWriter

    making, writer, recorder = gym.make(env), PartWriter(str(directory), "demo"), EpisodeRecorder()
    for episode in range(3):
        obs, _ = making.reset(seed=episode)
        rows, done = [], False
        while not done:
            action = making.action_space.sample()
            nxt, reward, terminated, truncated, _ = making.step(action)
            rows.append((obs, action, reward, terminated, truncated, nxt))
            obs, done = nxt, terminated or truncated
        names = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
        columns = {n: np.array([r[k] for r in rows])[:, None] for k, n in enumerate(names)}
        columns["eps_id"] = np.full((len(rows), 1), episode)
        columns["t"] = np.arange(len(rows))[:, None]
        writer.add(recorder.add(columns))
    writer.flush()
    return str(directory)


def trained_once(name: str, env: str, path):
    """One iteration of ``name`` on the in-process engine, saved at ``path``; the
    algorithm's greedy actions for some observations."""
    rng = np.random.default_rng(0)
    with hrl_tasks.SyncEngine() as engine:
        small = SMALL.get(name, {})
        if name in OFFLINE:
            small = {"experience_input": recording(env, path.parent / "recording"),
                     "updates_per_iteration": 5, "train_batch_size": 32,
                     "evaluation_episodes": 1, "hidden": (32, 32)}  # fmt: skip
        algo = ALGORITHMS[name]({"env": env, "num_workers": 1, "seed": 0, **small}, engine=engine)
        try:
            algo.train()
            algo.save(path)
            space = algo.policy.observation_space
            observations = rng.uniform(-1, 1, size=(5, *space.shape)).astype(space.dtype)
            actions = [algo.compute_single_action(obs) for obs in observations]
        finally:
            algo.stop()
    return observations, actions


@pytest.mark.parametrize("name", GYM_ALGORITHMS)
def test_a_loaded_algorithm_acts_as_the_saved_one_with_no_cluster(name, tmp_path):
    observations, actions = trained_once(name, "CartPole-v1", tmp_path / "run.hrl")
    loaded = load(tmp_path)
    assert loaded.acting_only and loaded.engine is None
    assert loaded.iteration == 1
    again = [loaded.compute_single_action(obs) for obs in observations]
    assert again == actions
    assert all(isinstance(a, int) and a in (0, 1) for a in again)
    with pytest.raises(hrl_tasks.EngineError, match="loaded to act"):
        loaded.train()
    loaded.stop()


@pytest.mark.parametrize("name", ["ppo", "sac", "td3"])
def test_continuous_actions_come_back_clipped_to_the_action_space(tmp_path, name):
    observations, actions = trained_once(name, "Pendulum-v1", tmp_path / "c.hrl")
    loaded = hrl_tasks.load(tmp_path / "c.hrl")
    for obs, action in zip(observations, actions, strict=True):
        again = loaded.compute_single_action(obs)
        np.testing.assert_array_equal(again, action)
        assert again.shape == (1,) and -2.0 <= again[0] <= 2.0


def test_a_run_directory_is_found_through_its_checkpoints_folder(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    observations, actions = trained_once("a2c", "CartPole-v1", tmp_path / "checkpoints" / "c.hrl")
    assert load(tmp_path).compute_single_action(observations[0]) == actions[0]


def test_loading_to_train_continues_the_run(tmp_path):
    trained_once("ppo", "CartPole-v1", tmp_path / "c.hrl")
    with hrl_tasks.SyncEngine() as engine:
        algo = load(tmp_path, engine=engine)
        try:
            assert not algo.acting_only
            assert algo.train()["iteration"] == 2
        finally:
            algo.stop()


def test_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint-NNNNNN.hrl in"):
        load(tmp_path)


UNTRUSTED = """
import pathlib

import gymnasium as gym

pathlib.Path(__file__).with_name("imported").write_text("evilmod ran")
gym.register(
    "EvilCartPole-v0",
    entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
    max_episode_steps=500,
)
"""


@pytest.fixture
def untrusted_module(tmp_path, monkeypatch):
    """``evilmod.py`` in the working directory (and on ``sys.path``): importing it writes
    the file ``imported`` beside it and registers ``EvilCartPole-v0``."""
    import sys

    import gymnasium as gym

    (tmp_path / "evilmod.py").write_text(UNTRUSTED)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "imported"
    sys.modules.pop("evilmod", None)
    gym.registry.pop("EvilCartPole-v0", None)


def with_env(path, env: str):
    """The checkpoint at ``path`` rewritten with ``env`` in its config."""
    from hrl_tasks.algorithms.checkpoint import read_checkpoint, write_checkpoint

    state = read_checkpoint(path)
    state["config"]["env"] = env
    return write_checkpoint(path, state)


def test_a_checkpoint_env_of_an_uninstalled_module_is_imported_only_when_trusted(
    tmp_path, untrusted_module
):
    from hrl_tasks.envs import UntrustedEnvError

    observations, actions = trained_once("ppo", "CartPole-v1", tmp_path / "c.hrl")
    for env in ("CartPole-v1", "gymnasium.envs.classic_control:CartPole-v1"):  # as before
        loaded = load(with_env(tmp_path / "c.hrl", env))
        assert loaded.compute_single_action(observations[0]) == actions[0]
    checkpoint = with_env(tmp_path / "c.hrl", "evilmod:EvilCartPole-v0")
    with pytest.raises(UntrustedEnvError) as refused:
        load(checkpoint)
    message = str(refused.value)
    assert str(checkpoint) in message and "'evilmod:EvilCartPole-v0'" in message
    assert "trust_env_modules=True" in message
    loaded = load(checkpoint, env="CartPole-v1")  # an env the user gives is not checked
    assert loaded.compute_single_action(observations[0]) == actions[0]
    assert not untrusted_module.exists()  # nothing of evilmod ran
    loaded = hrl_tasks.load(checkpoint, trust_env_modules=True)
    assert untrusted_module.read_text() == "evilmod ran"
    assert loaded.compute_single_action(observations[0]) == actions[0]
