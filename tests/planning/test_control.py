"""The classic-control models against gymnasium's own envs, and their `Game` adapter."""

import gymnasium as gym
import numpy as np
import pytest

from hrl_tasks.planning.control import (
    CartPoleModel,
    ControlGame,
    ControlState,
    PendulumModel,
    model_for,
)
from hrl_tasks.planning.game import Game, legal_actions

ENV_IDS = ["CartPole-v1", "Pendulum-v1"]
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
# gymnasium squares Pendulum's float32 torque with libm's powf, at times one float32 ulp
# off the correctly rounded square numpy's arrays give: 0.001 * 4 * 2**-23 * 2 < 1e-9.
REWARD = {"rtol": 1e-12, "atol": 1e-9}


def _random_action(env_id, env, rng):
    """An action of the env's own type; Pendulum's sometimes out of range, to test clipping."""
    if env_id == "CartPole-v1":
        return int(rng.integers(2))
    return rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_batch_matches_env_and_rows_are_independent(env_id):
    model = model_for(env_id)
    states, actions, next_states, rewards, terminals = [], [], [], [], []
    for seed in range(4):
        env = gym.make(env_id)
        rng = np.random.default_rng(100 + seed)
        env.reset(seed=seed)
        for _ in range(150):
            state = model.state_from_env(env)
            action = _random_action(env_id, env, rng)
            obs, reward, terminated, truncated, _ = env.step(action)

            got_state, got_reward, got_terminated = model.step_batch(state[None], [action])
            np.testing.assert_allclose(got_state[0], model.state_from_env(env), **TIGHT)
            np.testing.assert_allclose(got_reward[0], reward, **REWARD)
            assert got_terminated.dtype == bool and got_terminated[0] == terminated
            np.testing.assert_allclose(model.observation(got_state[0]), obs, rtol=1e-6)
            assert model.observation(got_state[0]).dtype == obs.dtype == np.float32

            states.append(state)
            actions.append(action)
            next_states.append(got_state[0])
            rewards.append(got_reward[0])
            terminals.append(got_terminated[0])
            if terminated or truncated:
                env.reset()
        env.close()
    if env_id == "CartPole-v1":
        assert 5 < sum(terminals) < len(terminals)  # terminations were checked too

    batch_state, batch_reward, batch_terminated = model.step_batch(
        np.array(states), np.array(actions)
    )
    np.testing.assert_allclose(batch_state, np.array(next_states), **TIGHT)
    np.testing.assert_allclose(batch_reward, np.array(rewards), **TIGHT)
    np.testing.assert_array_equal(batch_terminated, np.array(terminals))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_initial_state_is_drawn_as_reset_draws_it(env_id):
    model, env = model_for(env_id), gym.make(env_id)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        state = model.initial_state(np.random.default_rng(seed))
        np.testing.assert_array_equal(state, model.state_from_env(env))
        np.testing.assert_array_equal(model.observation(state), obs)
    assert model.state_dim == len(state)
    assert model.max_episode_steps == gym.spec(env_id).max_episode_steps
    assert model.action_space == env.action_space
    assert model.observation_space == env.observation_space


def _wide_states(env_id, rng, n):
    """States well beyond where episodes start: angles wrap, speeds clip."""
    if env_id == "CartPole-v1":
        return rng.uniform([-2.3, -3, -0.2, -3], [2.3, 3, 0.2, 3], size=(n, 4))
    return rng.uniform([-20.0, -8.0], [20.0, 8.0], size=(n, 2))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_set_env_state_then_step_matches_step_batch(env_id):
    model, env = model_for(env_id), gym.make(env_id)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    states = _wide_states(env_id, rng, 200)
    actions = [_random_action(env_id, env, rng) for _ in states]
    next_states, rewards, terminated = model.step_batch(states, np.array(actions))
    for i, (state, action) in enumerate(zip(states, actions, strict=True)):
        model.set_env_state(env, state)
        np.testing.assert_array_equal(model.state_from_env(env), state)
        _, reward, env_terminated, _, _ = env.step(action)
        np.testing.assert_allclose(next_states[i], model.state_from_env(env), **TIGHT)
        np.testing.assert_allclose(rewards[i], reward, **REWARD)
        assert terminated[i] == env_terminated
    if env_id == "Pendulum-v1":
        assert (np.abs(next_states[:, 1]) == 8.0).any()  # the speed clip was exercised
    else:
        assert terminated.any() and not terminated.all()


def test_cartpole_set_env_state_after_termination_gives_reward_one():
    model, env = CartPoleModel(), gym.make("CartPole-v1")
    env.reset(seed=0)
    falling = np.array([0.0, 0.0, 0.2, 2.0])
    for _ in range(2):  # the second time, after the env has terminated once
        model.set_env_state(env, falling)
        _, reward, terminated, _, _ = env.step(1)
        assert terminated and reward == 1.0
    _, rewards, terminated = model.step_batch(falling[None], [1])
    assert terminated[0] and rewards[0] == 1.0


def test_batched_actions_shapes():
    model = PendulumModel()
    states = np.zeros((3, 2))
    flat = model.step_batch(states, np.array([-1.0, 0.0, 1.0], dtype=np.float32))
    column = model.step_batch(states, np.array([[-1.0], [0.0], [1.0]], dtype=np.float32))
    for a, b in zip(flat, column, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="Actions must be"):
        model.step_batch(states, np.zeros(2))
    with pytest.raises(ValueError, match="States must be"):
        model.step_batch(np.zeros((3, 4)), np.zeros(3))
    with pytest.raises(ValueError, match="0 or 1"):
        CartPoleModel().step_batch(np.zeros((2, 4)), [0, 2])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_state_from_observation_recovers_the_state(env_id):
    model = model_for(env_id)
    states = _wide_states(env_id, np.random.default_rng(2), 50)
    recovered = model.state_from_observation(model.observation(states))
    np.testing.assert_allclose(model.observation(recovered), model.observation(states), atol=1e-6)
    if env_id == "CartPole-v1":
        np.testing.assert_allclose(recovered, states, rtol=1e-6)


def test_model_for():
    assert isinstance(model_for("CartPole-v1"), CartPoleModel)
    assert model_for("Pendulum-v1", g=9.81).g == 9.81
    with pytest.raises(ValueError, match="supported: CartPole-v1, Pendulum-v1") as info:
        model_for("Acrobot-v1")
    assert "'Acrobot-v1'" in str(info.value)
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        model_for("CartPole-v0")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_control_game_rollout(env_id):
    model = model_for(env_id)
    game = ControlGame(model, horizon=8)
    assert isinstance(game, Game)
    assert game.num_players == 1 and game.observation_shape == model.observation_space.shape
    rng = np.random.default_rng(3)
    state = game.initial_state()
    assert state == ControlGame(model, horizon=8).initial_state()  # deterministic
    np.testing.assert_array_equal(state.physics, model.initial_state(np.random.default_rng(0)))
    physics, total, seen = np.array([state.physics]), 0.0, {state}
    while not game.is_terminal(state):
        assert game.to_play(state) == 0 and game.legal_mask(state).all()
        action = int(rng.choice(legal_actions(game, state)))
        state = game.step(state, action)
        physics, reward, _ = model.step_batch(physics, game.action_values[action : action + 1])
        total += reward[0]
        np.testing.assert_array_equal(state.physics, physics[0])
        np.testing.assert_array_equal(game.observation(state), model.observation(physics[0]))
        seen.add(state)
    assert state.steps == 8 and not state.terminated  # terminal at the horizon
    assert len(seen) == 9
    np.testing.assert_allclose(game.returns(state), [total], rtol=1e-12)
    assert not game.legal_mask(state).any()
    with pytest.raises(ValueError, match="terminal"):
        game.step(state, 0)


def test_control_game_states_hash_equal():
    game = ControlGame(CartPoleModel(), horizon=10, start=[0.0, 0.1, 0.02, -0.1])
    a = game.step(game.step(game.initial_state(), 0), 1)
    b = game.step(game.step(game.initial_state(), 0), 1)
    assert a is not b and a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a != game.step(game.step(game.initial_state(), 1), 0)
    assert isinstance(a, tuple) and isinstance(a, ControlState)
    with pytest.raises(ValueError, match="not in"):
        game.step(a, 2)


def test_control_game_cartpole_terminates_when_the_pole_falls():
    game = ControlGame(CartPoleModel(), horizon=500, start=[0.0, 0.0, 0.2, 0.5])
    state = game.step(game.initial_state(), 1)
    assert state.terminated and game.is_terminal(state)
    np.testing.assert_array_equal(game.returns(state), [1.0])


def test_control_game_pendulum_actions_match_the_env():
    model, env = PendulumModel(), gym.make("Pendulum-v1")
    env.reset(seed=0)
    game = ControlGame(model, horizon=20, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(game.action_values[:, 0], [-2, -1, 0, 1, 2])
    assert game.num_actions == 5
    assert ControlGame(model, horizon=3, discretization=3).num_actions == 3
    assert ControlGame(model, horizon=3, discretization=[-0.5, 0.5]).num_actions == 2
    with pytest.raises(ValueError, match="discretization"):
        ControlGame(CartPoleModel(), horizon=3, discretization=3)

    state = game.initial_state()
    model.set_env_state(env, np.array(state.physics))
    total = 0.0
    for action in [0, 4, 2, 1, 3, 4, 4, 0]:
        state = game.step(state, action)
        obs, reward, _, _, _ = env.step(game.env_action(action))
        total += reward
        np.testing.assert_allclose(state.physics, model.state_from_env(env), **TIGHT)
        np.testing.assert_array_equal(game.observation(state), obs)
    np.testing.assert_allclose(game.returns(state), [total], **REWARD)

    back = game.state_from_observation(obs)
    assert back.steps == 0 and back.episode_return == 0.0 and not back.terminated
    np.testing.assert_allclose(game.observation(back), obs, atol=1e-6)
