"""Models of gymnasium's classic-control envs, for planning from a state one can set.

A model re-implements an env's physics and reward as vectorized numpy over a
batch of internal states, so MPC (CEM, MPPI) can roll out many action sequences
at once, and `ControlGame` wraps one as a single-player `Game` for tree search::

    model = model_for("Pendulum-v1")
    states = np.repeat(model.initial_state(rng)[None], 64, axis=0)
    for t in range(horizon):
        states, rewards, terminated = model.step_batch(states, actions[:, t])

The internal state is the env's ``env.unwrapped.state`` (float64): CartPole's
``(x, x_dot, theta, theta_dot)`` and Pendulum's ``(theta, theta_dot)``.
``step_batch`` matches the env's ``step`` to rounding (the same operations in
the same order and dtypes), and ``set_env_state`` moves a real env to a state,
so a plan can be executed in the env it was made for.
"""

from __future__ import annotations

import abc
import difflib
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ClassicControlModel(abc.ABC):
    """A classic-control env's dynamics and reward as pure batched functions.

    Attributes:
        env_id: The gymnasium id the model reproduces.
        state_dim: Length of the internal state.
        action_space: The env's action space.
        observation_space: The env's observation space.
        max_episode_steps: The env's time limit (truncation), as registered.
    """

    env_id: str
    state_dim: int
    action_space: spaces.Space
    observation_space: spaces.Box
    max_episode_steps: int

    @abc.abstractmethod
    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        """A start state of shape ``(state_dim,)``, drawn as the env's ``reset`` draws it.

        ``initial_state(np.random.default_rng(seed))`` equals the state after
        ``env.reset(seed=seed)``.
        """

    @abc.abstractmethod
    def step_batch(
        self, states: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One env step for each row.

        Args:
            states: ``(N, state_dim)`` internal states.
            actions: ``(N,)`` or ``(N, act_dim)`` env actions.

        Returns:
            ``(next_states (N, state_dim) float64, rewards (N,) float64,
            terminated (N,) bool)``. The inputs are not changed.
        """

    @abc.abstractmethod
    def terminated(self, states: np.ndarray) -> np.ndarray:
        """Bool array over the leading axes: whether each state ends the episode."""

    @abc.abstractmethod
    def observation(self, states: np.ndarray) -> np.ndarray:
        """The env's float32 observation of each state; ``(..., state_dim) -> (..., obs_dim)``."""

    @abc.abstractmethod
    def state_from_observation(self, observations: np.ndarray) -> np.ndarray:
        """The internal state an observation shows, up to float32 rounding; ``(..., obs_dim)``."""

    def state_from_env(self, env: gym.Env) -> np.ndarray:
        """A copy of the internal state of ``env`` (a wrapped or bare env of ``env_id``)."""
        return np.array(env.unwrapped.state, dtype=np.float64)

    def set_env_state(self, env: gym.Env, state: np.ndarray) -> None:
        """Moves ``env`` (already ``reset``) to ``state``; its time-limit counter is kept."""
        env.unwrapped.state = _as_state(state, self.state_dim)


class CartPoleModel(ClassicControlModel):
    """``CartPole-v1``: a reward of 1 per step, the terminating step included.

    Stepping from a state that has already terminated gives reward 1 here, where
    gymnasium gives 0 (and warns that such steps are undefined).
    """

    env_id = "CartPole-v1"
    state_dim = 4
    max_episode_steps = 500
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5  # half the pole's length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self) -> None:
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(low=-0.05, high=0.05, size=(4,))

    def step_batch(
        self, states: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        states = _as_states(states, self.state_dim)
        actions = _as_actions(actions, len(states), 1)[:, 0]
        if not np.isin(actions, (0, 1)).all():
            raise ValueError(f"CartPole actions must be 0 or 1, got {np.unique(actions)}")
        x, x_dot, theta, theta_dot = states.T
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        # Same operations, in the same order, as gymnasium's CartPoleEnv.step (euler).
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        next_states = np.stack(
            [
                x + self.tau * x_dot,
                x_dot + self.tau * xacc,
                theta + self.tau * theta_dot,
                theta_dot + self.tau * thetaacc,
            ],
            axis=-1,
        )
        return next_states, np.ones(len(states)), self.terminated(next_states)

    def terminated(self, states: np.ndarray) -> np.ndarray:
        states = np.asarray(states)
        x, theta = states[..., 0], states[..., 2]
        return (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )

    def observation(self, states: np.ndarray) -> np.ndarray:
        return np.asarray(states, dtype=np.float32)

    def state_from_observation(self, observations: np.ndarray) -> np.ndarray:
        return np.asarray(observations, dtype=np.float64)

    def set_env_state(self, env: gym.Env, state: np.ndarray) -> None:
        """Moves ``env`` to ``state``, as mid-episode (a terminating step then gives 1)."""
        super().set_env_state(env, state)
        env.unwrapped.steps_beyond_terminated = None


class PendulumModel(ClassicControlModel):
    """``Pendulum-v1``: reward ``-(angle_normalize(theta)**2 + 0.1 thdot**2 + 0.001 u**2)``.

    The torque is clipped to ``[-2, 2]`` and the new angular velocity to
    ``[-8, 8]``; the episode never terminates, only truncates. Torque terms are
    computed in the actions' float dtype (float32 from the env's action space),
    as gymnasium does. One difference remains: gymnasium squares a float32
    scalar torque with libm's ``powf``, which now and then (under 0.1% of
    torques) is one float32 ulp off the correctly rounded square that numpy's
    arrays give, so rewards can differ by up to about ``2.4e-10``.

    Args:
        g: Gravity, as ``gymnasium.make("Pendulum-v1", g=...)``.
    """

    env_id = "Pendulum-v1"
    state_dim = 2
    max_episode_steps = 200
    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    length = 1.0  # gymnasium's `l`

    def __init__(self, g: float = 10.0) -> None:
        self.g = g
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.action_space = spaces.Box(
            low=-self.max_torque, high=self.max_torque, shape=(1,), dtype=np.float32
        )
        self.observation_space = spaces.Box(low=-high, high=high, dtype=np.float32)

    def initial_state(self, rng: np.random.Generator) -> np.ndarray:
        high = np.array([np.pi, 1.0])
        return rng.uniform(low=-high, high=high)

    def step_batch(
        self, states: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        states = _as_states(states, self.state_dim)
        u = _as_actions(actions, len(states), 1)[:, 0]
        if not np.issubdtype(u.dtype, np.floating):
            u = u.astype(np.float64)
        th, thdot = states.T
        g, m, length, dt = self.g, self.m, self.length, self.dt
        # Same operations, in the same order, as gymnasium's PendulumEnv.step.
        u = np.clip(u, -self.max_torque, self.max_torque)
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * g / (2 * length) * np.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        next_states = np.stack([newth, newthdot], axis=-1)
        return next_states, -costs, np.zeros(len(states), dtype=bool)

    def terminated(self, states: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(states)[:-1], dtype=bool)

    def observation(self, states: np.ndarray) -> np.ndarray:
        states = np.asarray(states, dtype=np.float64)
        theta, thetadot = states[..., 0], states[..., 1]
        return np.stack([np.cos(theta), np.sin(theta), thetadot], axis=-1).astype(np.float32)

    def state_from_observation(self, observations: np.ndarray) -> np.ndarray:
        """``(arctan2(sin, cos), thetadot)``: the angle comes back in ``[-pi, pi]``."""
        obs = np.asarray(observations, dtype=np.float64)
        return np.stack([np.arctan2(obs[..., 1], obs[..., 0]), obs[..., 2]], axis=-1)


def angle_normalize(x: np.ndarray) -> np.ndarray:
    """An angle mapped to ``[-pi, pi)``, as gymnasium's pendulum does."""
    return ((x + np.pi) % (2 * np.pi)) - np.pi


_MODELS = {"CartPole-v1": CartPoleModel, "Pendulum-v1": PendulumModel}


def model_for(env_id: str, **kwargs: Any) -> ClassicControlModel:
    """The model of a supported env.

    Args:
        env_id: A gymnasium id, e.g. ``"CartPole-v1"``.
        **kwargs: The model's arguments (``g`` for Pendulum).

    Raises:
        ValueError: ``env_id`` has no model; the message lists the supported ids.
    """
    if env_id not in _MODELS:
        close = difflib.get_close_matches(env_id, list(_MODELS))
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"No planning model for env {env_id!r}; supported: {', '.join(_MODELS)}.{hint}"
        )
    return _MODELS[env_id](**kwargs)


class ControlState(NamedTuple):
    """A `ControlGame` state: immutable and hashable."""

    physics: tuple[float, ...]
    steps: int
    episode_return: float
    terminated: bool


class ControlGame:
    """A classic-control model as a single-player `hrl_tasks.planning.game.Game`, for search.

    A state is a `ControlState`; it is terminal once the env terminates or
    ``horizon`` steps have been taken, and ``returns`` is the return so far::

        game = ControlGame(model_for("CartPole-v1"), horizon=50)
        state = game.initial_state()
        while not game.is_terminal(state):
            state = game.step(state, search(game, state))
        env.step(game.env_action(action))  # the same action in a real env

    Args:
        model: The dynamics.
        horizon: Steps after which a state is terminal.
        discretization: For a continuous action space, the actions search picks
            from: a count of evenly spaced values in ``[low, high]`` (default 5),
            or the values themselves, ``(K,)`` or ``(K, act_dim)``. Must be None
            for a discrete action space, whose actions are used as they are.
        start: The physics state of ``initial_state()``; by default one drawn by
            ``model.initial_state(rng)``.
        rng: Draws the default start; ``np.random.default_rng(0)`` if None.
    """

    num_players = 1

    def __init__(
        self,
        model: ClassicControlModel,
        horizon: int,
        discretization: int | Sequence[float] | np.ndarray | None = None,
        start: np.ndarray | Sequence[float] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be positive, got {horizon}")
        self.model = model
        self.horizon = int(horizon)
        self.name = model.env_id
        self.observation_shape = tuple(model.observation_space.shape)
        self.action_values = _action_values(model.action_space, discretization)
        self.num_actions = len(self.action_values)
        if start is None:
            start = model.initial_state(np.random.default_rng(0) if rng is None else rng)
        self._start = _as_state(start, model.state_dim)

    def initial_state(self) -> ControlState:
        physics = tuple(self._start.tolist())
        return ControlState(physics, 0, 0.0, bool(self.model.terminated(self._start)))

    def to_play(self, state: ControlState) -> int:
        return 0

    def legal_mask(self, state: ControlState) -> np.ndarray:
        return np.full(self.num_actions, not self.is_terminal(state))

    def env_action(self, action: int) -> int | np.ndarray:
        """What to pass to the env's ``step`` for the game's ``action``."""
        value = self.action_values[action]
        return int(value) if isinstance(self.model.action_space, spaces.Discrete) else value.copy()

    def step(self, state: ControlState, action: int) -> ControlState:
        if self.is_terminal(state):
            raise ValueError(f"No move at a terminal state: {state}")
        if not 0 <= action < self.num_actions:
            raise ValueError(f"Action {action} not in [0, {self.num_actions})")
        next_states, rewards, terminated = self.model.step_batch(
            np.array([state.physics]), self.action_values[action : action + 1]
        )
        return ControlState(
            tuple(next_states[0].tolist()),
            state.steps + 1,
            state.episode_return + float(rewards[0]),
            bool(terminated[0]),
        )

    def is_terminal(self, state: ControlState) -> bool:
        return state.terminated or state.steps >= self.horizon

    def returns(self, state: ControlState) -> np.ndarray:
        return np.array([state.episode_return])

    def observation(self, state: ControlState) -> np.ndarray:
        return self.model.observation(np.array(state.physics))

    def state_from_observation(self, observation: np.ndarray) -> ControlState:
        """The state an env observation shows (float32-rounded), at step 0 with return 0."""
        physics = self.model.state_from_observation(np.asarray(observation))
        return ControlState(tuple(physics.tolist()), 0, 0.0, bool(self.model.terminated(physics)))


def _action_values(
    space: spaces.Space, discretization: int | Sequence[float] | np.ndarray | None
) -> np.ndarray:
    """The env actions a game's action indices stand for: ``(K,)`` ints or ``(K, act_dim)``."""
    if isinstance(space, spaces.Discrete):
        if discretization is not None:
            raise ValueError("discretization is only for continuous action spaces")
        return space.start + np.arange(space.n)
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"Unsupported action space {space}")
    if discretization is None:
        discretization = 5
    if isinstance(discretization, (int, np.integer)):
        if discretization < 2 or space.shape[0] != 1:
            raise ValueError(
                f"A count of {discretization} discretizes only a 1-d action space, into 2 or more"
            )
        return np.linspace(space.low, space.high, int(discretization), dtype=space.dtype)
    values = np.asarray(discretization, dtype=space.dtype).reshape(-1, space.shape[0])
    if len(values) == 0:
        raise ValueError("discretization holds no action")
    return values


def _as_state(state: np.ndarray | Sequence[float], state_dim: int) -> np.ndarray:
    """A float64 copy of one state, checked to be ``(state_dim,)``."""
    state = np.array(state, dtype=np.float64)
    if state.shape != (state_dim,):
        raise ValueError(f"A state must be ({state_dim},), got {state.shape}")
    return state


def _as_states(states: np.ndarray | Sequence[float], state_dim: int) -> np.ndarray:
    """``(N, state_dim)`` float64 from one state or a batch."""
    states = np.atleast_2d(np.asarray(states, dtype=np.float64))
    if states.ndim != 2 or states.shape[1] != state_dim:
        raise ValueError(f"States must be (N, {state_dim}), got {states.shape}")
    return states


def _as_actions(actions: np.ndarray, n: int, act_dim: int) -> np.ndarray:
    """``(n, act_dim)`` from ``(n,)`` or ``(n, act_dim)`` actions, dtype kept."""
    actions = np.asarray(actions)
    if actions.shape == (n,):
        actions = actions[:, None]
    if actions.shape != (n, act_dim):
        raise ValueError(f"Actions must be ({n},) or ({n}, {act_dim}), got {actions.shape}")
    return actions
