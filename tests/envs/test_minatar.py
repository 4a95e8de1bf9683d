"""MinAtar ids through the env-spec rule: the package's games with channels-first
planes, a small CNN, and training by name on a real cluster."""

import sys

import gymnasium as gym
import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.envs.minatar import make_minatar
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig
from hrl_tasks.policies.models import SmallCNN
from hrl_tasks.policies.spaces import PlanesBox
from hrl_tasks.rollout import UnknownEnvError, env_creator, resolve_env

pytest.importorskip("minatar")

BREAKOUT = "MinAtar/Breakout-v1"


def test_a_minatar_id_is_the_package_s_game_with_channels_first_planes():
    import minatar.gym

    minatar.gym.register_envs()
    env, raw = env_creator(BREAKOUT)(), gym.make(BREAKOUT)
    assert isinstance(env.observation_space, PlanesBox)
    assert env.observation_space.shape == (4, 10, 10) and env.action_space == raw.action_space
    obs, _ = env.reset(seed=3)
    want, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs, np.moveaxis(want, -1, 0))
    actions = np.random.default_rng(0).integers(0, env.action_space.n, 300)
    for t, action in enumerate(actions):
        obs, reward, terminated, truncated, _ = env.step(action)
        want, want_reward, want_terminated, want_truncated, _ = raw.step(action)
        np.testing.assert_array_equal(obs, np.moveaxis(want, -1, 0), err_msg=f"step {t}")
        assert (reward, terminated, truncated) == (want_reward, want_terminated, want_truncated)
        assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 1}
        if terminated:
            obs, _ = env.reset(seed=t)
            raw.reset(seed=t)


def test_the_planes_get_the_minatar_paper_s_network():
    env = make_minatar("MinAtar/SpaceInvaders-v1")
    policy = DQNPolicy(
        env.observation_space, env.action_space, DQNPolicyConfig(seed=0, hidden=(128,))
    )
    assert isinstance(policy.model.encoder, SmallCNN)
    assert policy.model.encoder.out_dim == 16 * 8 * 8
    obs, _ = env.reset(seed=0)
    actions, _ = policy.compute_actions(obs[None])
    assert actions.shape == (1,) and 0 <= actions[0] < env.action_space.n


def test_an_unknown_minatar_id_suggests_neighbours():
    with pytest.raises(UnknownEnvError, match=r"did you mean 'MinAtar/Breakout-v1'"):
        resolve_env("MinAtar/Breakuot-v1")


def test_a_missing_minatar_names_what_to_install(monkeypatch):
    for name in [n for n in sys.modules if n.startswith("minatar")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "minatar", None)  # import minatar now fails
    monkeypatch.setattr(
        gym, "registry", {k: v for k, v in gym.registry.items() if "MinAtar" not in k}
    )
    with pytest.raises(UnknownEnvError, match=r"minatar.*pip install 'hrl_tasks\[minatar\]'"):
        resolve_env("MinAtar/Freeway-v1")


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_rainbow_trains_on_minatar_by_name_and_its_checkpoint_acts(engine, tmp_path):
    algo, result = hrl_tasks.train(
        "rainbow",
        env=BREAKOUT,
        stop={"iteration": 2},
        engine=engine,
        out=tmp_path,
        num_workers=2,
        num_envs_per_worker=2,
        learning_starts=64,
        train_steps_per_round=2,
        min_steps_per_report=128,
        hidden=(32,),
        v_min=-10.0,
        v_max=10.0,
        seed=0,
    )
    obs, _ = make_minatar(BREAKOUT).reset(seed=1)
    action = algo.compute_single_action(obs)
    algo.stop()
    assert result["iteration"] == 2 and result["env_steps_trained"] > 0
    loaded = hrl_tasks.load(tmp_path)
    assert loaded.compute_single_action(obs) == action
