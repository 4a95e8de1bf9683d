"""EnvPool as the rollout workers' backend: same observations and dynamics as
gymnasium's envs, the project's reset rule (an env reset in the step its episode
ends), the episode bookkeeping, Atari's frames, and training on a real cluster."""

import gymnasium as gym
import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms.ppo.config import PPOConfig
from hrl_tasks.envs.make import make_env
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import RolloutWorker, env_creator

pytest.importorskip("envpool")


def test_cartpole_on_envpool_moves_as_gymnasium_s_and_resets_in_the_step_it_ends():
    pool = make_env("CartPole-v1", 4, seed=0, backend="envpool")
    reference = gym.make("CartPole-v1").unwrapped
    assert pool.single_observation_space.shape == reference.observation_space.shape
    assert pool.single_action_space == reference.action_space
    obs, _ = pool.reset(seed=0)
    rng, ends, lengths = np.random.default_rng(0), 0, np.zeros(4, int)
    for _ in range(400):
        actions = rng.integers(0, 2, 4)
        before = obs.copy()
        obs, rewards, terminateds, truncateds, infos = pool.step(actions)
        lengths += 1
        ended = terminateds | truncateds
        for i in range(4):  # gymnasium's CartPole from the same state and action
            reference.state, reference.steps_beyond_terminated = before[i].astype(np.float64), None
            want, want_reward, want_terminated, _, _ = reference.step(int(actions[i]))
            got = infos["final_obs"][i] if ended[i] else obs[i]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            assert (rewards[i], terminateds[i]) == (want_reward, want_terminated)
            if ended[i]:  # reset at once: the next episode's first observation
                assert np.abs(obs[i]).max() <= 0.05 and infos["_final_obs"][i]
                assert lengths[i] <= 500
                lengths[i], ends = 0, ends + 1
        assert "final_obs" in infos or not ended.any()
    assert ends >= 10


def test_a_rollout_worker_on_envpool_keeps_its_episodes_books():
    worker = RolloutWorker(
        "CartPole-v1",
        lambda obs_space, act_space: PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0)),
        num_envs=2,
        rollout_fragment_length=300,
        seed=0,
        env_backend="envpool",
    )
    batch, metrics = worker.sample()
    assert len(batch) == 600
    t = batch["t"].reshape(2, 300) if batch["t"].ndim == 1 else batch["t"]
    eps = batch["eps_id"].reshape(t.shape)
    ends = (batch["terminateds"] | batch["truncateds"]).reshape(t.shape)
    lengths = []
    for env in range(t.shape[0]):
        for row in np.flatnonzero(ends[env]):
            lengths.append(t[env, row] + 1)
            if row + 1 < t.shape[1]:  # the next row starts a new episode
                assert t[env, row + 1] == 0 and eps[env, row + 1] != eps[env, row]
    assert sorted(metrics["episode_lengths"]) == sorted(lengths)
    assert metrics["episode_returns"] == pytest.approx(metrics["episode_lengths"])  # 1 a step
    assert worker.get_rng_state()["envs"] == []  # EnvPool's generators live in C++


def test_an_atari_id_on_envpool_has_the_ale_wrappers_frames():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    pool = make_env("Breakout-v5", 1, seed=0, backend="envpool")
    ale = make_env("ALE/Breakout-v5", 1, seed=0)
    assert pool.single_observation_space == ale.single_observation_space  # uint8 (4, 84, 84)
    for env in (pool, ale):
        obs, _ = env.reset(seed=0)
        for _ in range(20):  # the stack moves by one frame a step, channels first
            nxt, _, terminated, truncated, _ = env.step(np.array([1]))
            if not (terminated | truncated).any():
                np.testing.assert_array_equal(nxt[0, :3], obs[0, 1:])
            obs = nxt
        assert obs.dtype == np.uint8 and obs.shape == (1, 4, 84, 84)


def test_the_backend_key_is_checked_before_any_cluster_starts():
    with pytest.raises(ConfigError, match=r"env_backend must be one of \('gymnasium', 'envpool'\)"):
        PPOConfig.from_dict({"env_backend": "pool"})
    with pytest.raises(ConfigError, match=r"EnvPool id.*did you mean 'CartPole-v1'"):
        PPOConfig.from_dict({"env_backend": "envpool", "env": "CartPol-v1"})
    # "envpool:Id" keeps README's module:Id meaning: gymnasium's env, after importing envpool.
    made = env_creator("envpool:CartPole-v1")()
    assert isinstance(made.unwrapped, gym.envs.classic_control.CartPoleEnv)


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_ppo_trains_on_envpool_workers_and_its_checkpoint_acts(engine, tmp_path):
    algo, result = hrl_tasks.train(
        "ppo",
        env="CartPole-v1",
        env_backend="envpool",
        engine=engine,
        stop={"iteration": 2},
        out=tmp_path,
        num_workers=2,
        train_batch_size=256,
        minibatch_size=64,
        seed=0,
    )
    evaluation = algo.evaluate(episodes=2)
    algo.stop()
    assert result["iteration"] == 2 and result["env_steps_sampled"] >= 512
    assert result["episodes_total"] > 0 and evaluation["evaluation_episodes"] == 2
    loaded = hrl_tasks.load(tmp_path)
    assert loaded.config.env_backend == "envpool"
