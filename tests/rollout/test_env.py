import pickle

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec

from hrl_tasks.envs.make import SameStepVectorEnv
from hrl_tasks.rollout import (
    CatchEnvErrors,
    EnvError,
    UnknownEnvError,
    make_env,
    register_env,
    resolve_env,
)
from tests.rollout.envs import ChainEnv, WrongShapeEnv


def test_make_env_from_gymnasium_id():
    envs = make_env("CartPole-v1", num_envs=3, seed=0)
    assert isinstance(envs, gym.vector.SyncVectorEnv)  # a SameStepVectorEnv
    assert envs.num_envs == 3
    assert envs.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = envs.reset()
    assert obs.shape == (3, 4)
    envs.close()


def test_make_env_seed_is_reproducible():
    first = make_env("CartPole-v1", num_envs=2, seed=7).reset()[0]
    again = make_env("CartPole-v1", num_envs=2, seed=7).reset()[0]
    other = make_env("CartPole-v1", num_envs=2, seed=8).reset()[0]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_make_env_from_callable_gets_env_config_as_kwargs():
    envs = make_env(ChainEnv, num_envs=2, env_config={"terminate_at": 2})
    envs.reset(seed=0)
    _, _, terminateds, _, infos = envs.step(np.zeros(2, np.int64))
    assert not terminateds.any()
    _, _, terminateds, _, infos = envs.step(np.zeros(2, np.int64))
    assert terminateds.all()
    np.testing.assert_array_equal(np.stack(infos["final_obs"]), [[2.0], [2.0]])


def test_make_env_rejects_a_callable_that_returns_no_env():
    with pytest.raises(TypeError, match="not a gym.Env"):
        make_env(lambda: object())


def test_registered_name_lives_in_gymnasium_registry_and_travels_as_a_spec():
    register_env("HrlChainTest-v0", ChainEnv, max_episode_steps=3)
    try:
        assert "HrlChainTest-v0" in gym.registry
        envs = make_env("HrlChainTest-v0", num_envs=1, env_config={"terminate_at": 10})
        envs.reset(seed=0)
        truncated = [envs.step(np.zeros(1, np.int64))[3][0] for _ in range(3)]
        assert truncated == [False, False, True]  # max_episode_steps from the registration
        spec = resolve_env("HrlChainTest-v0")
        assert isinstance(spec, EnvSpec)
        restored = pickle.loads(cloudpickle.dumps(spec))
        assert make_env(restored).num_envs == 1
    finally:
        gym.registry.pop("HrlChainTest-v0", None)


def test_resolve_env_keeps_plain_ids_and_callables():
    assert resolve_env("CartPole-v1") == "CartPole-v1"
    assert resolve_env(ChainEnv) is ChainEnv


def test_unknown_id_fails_at_once_and_suggests_the_close_name():
    with pytest.raises(UnknownEnvError, match="CartPole-v1") as info:
        make_env("CartPol-v1")
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnknownEnvError, match="unknown env 'NoSuchThingAtAll-v9'"):
        make_env("NoSuchThingAtAll-v9")


def test_resolve_env_rejects_other_types():
    with pytest.raises(TypeError):
        resolve_env(42)


def test_catch_env_errors_turns_a_crash_into_a_counted_truncation_and_a_new_env():
    env = CatchEnvErrors(lambda: ChainEnv(fail_at=2))
    env.reset(seed=0)
    first = env.env
    obs, *_ = env.step(0)
    crashed = env.step(0)
    assert env.num_errors == 1
    np.testing.assert_array_equal(crashed[0], obs)  # the last observation
    assert crashed[1:4] == (0.0, False, True)
    assert "simulated env crash" in crashed[4]["env_error"]
    assert env.env is not first  # built again: an env that raised may be broken


def test_an_env_that_keeps_failing_ends_with_a_named_error():
    env = CatchEnvErrors(lambda: ChainEnv(fail_at=1), name="Chain-v0", max_errors_in_a_row=3)
    env.reset(seed=0)
    for _ in range(3):
        assert env.step(0)[3] is True
        env.reset()
    with pytest.raises(EnvError, match=r"'Chain-v0' raised in step 4 times in a row") as info:
        env.step(0)
    assert "simulated env crash" in str(info.value.__cause__)


def test_a_good_step_forgives_earlier_failures():
    env = CatchEnvErrors(lambda: ChainEnv(fail_at=2), max_errors_in_a_row=1)
    env.reset(seed=0)
    for _ in range(5):  # step 1 succeeds, step 2 fails, on each new env
        env.step(0)
        assert env.step(0)[3] is True
        env.reset()
    assert env.num_errors == 5


class FailingReset(ChainEnv):
    def reset(self, *, seed=None, options=None):
        raise OSError("the simulator is gone")


def test_a_reset_that_keeps_failing_ends_with_a_named_error():
    with pytest.raises(EnvError, match="raised in reset 3 times in a row"):
        CatchEnvErrors(FailingReset, max_errors_in_a_row=2).reset()


def test_an_observation_of_the_wrong_shape_is_named():
    with pytest.raises(EnvError, match=r"observation of shape \(1,\) from reset.*\(2,\)"):
        make_env(WrongShapeEnv, catch_errors=True).reset(seed=0)


class InfoEveryThirdStep(gym.Wrapper):
    """Puts ``{"third": step count}`` in the info of every third step (and a reset info)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.count = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {"reset_marker": 1}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        if self.count % 3 == 0:
            info = {**info, "third": self.count}
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("with_infos", [False, True])
def test_same_step_vector_env_matches_gymnasium(with_infos):
    def create():
        env = gym.make("CartPole-v1", max_episode_steps=15)
        return InfoEveryThirdStep(env) if with_infos else env

    ours = SameStepVectorEnv([create] * 3)
    theirs = gym.vector.SyncVectorEnv(
        [create] * 3, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    np.testing.assert_array_equal(ours.reset(seed=5)[0], theirs.reset(seed=5)[0])
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        actions = rng.integers(0, 2, size=3)
        mine, gyms = ours.step(actions), theirs.step(actions)
        for a, b in zip(mine[:4], gyms[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        assert sorted(mine[4]) == sorted(gyms[4])
        if "final_obs" in gyms[4]:
            ended += 1
            np.testing.assert_array_equal(mine[4]["_final_obs"], gyms[4]["_final_obs"])
            for i in np.flatnonzero(gyms[4]["_final_obs"]):
                np.testing.assert_array_equal(mine[4]["final_obs"][i], gyms[4]["final_obs"][i])
        for key in ("third", "reset_marker"):
            if key in gyms[4]:
                np.testing.assert_array_equal(mine[4][key], gyms[4][key])
                np.testing.assert_array_equal(mine[4]["_" + key], gyms[4]["_" + key])
        if "final_info" in gyms[4] and "third" in gyms[4]["final_info"]:
            np.testing.assert_array_equal(
                mine[4]["final_info"]["third"], gyms[4]["final_info"]["third"]
            )
    assert ended > 0  # episodes ended, so the final-observation path ran


def test_same_step_vector_env_returns_a_copy_unless_told_not_to():
    envs = SameStepVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    first, _ = envs.reset(seed=0)
    second = envs.step(np.zeros(2, np.int64))[0]
    assert not np.shares_memory(first, second)
    shared = SameStepVectorEnv([lambda: gym.make("CartPole-v1")] * 2, copy=False)
    shared.reset(seed=0)
    a = shared.step(np.zeros(2, np.int64))[0]
    b = shared.step(np.zeros(2, np.int64))[0]
    assert np.shares_memory(a, b)  # the env's own buffer, rewritten by each step
