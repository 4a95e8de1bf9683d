"""Multi-agent envs: one dict-based interface, and adapters for PettingZoo's two.

`MultiAgentEnv` is the interface rollout workers step (RLlib's convention)::

    obs, infos = env.reset(seed=0)          # {agent: observation} of the agents to act
    obs, rewards, terminateds, truncateds, infos = env.step({agent: action for agent in obs})

* ``obs`` holds every agent that must act at the next step, and every agent
  that has just finished (its last observation; it then leaves the episode).
  Agents may finish at different times.
* ``rewards`` holds each agent's reward since its last report; an agent may
  get a reward while it is not in ``obs`` (in turn-based games, when the
  opponent's move ends the game it is reported with the last observation).
* ``terminateds`` and ``truncateds`` hold the agents that finished, and the key
  ``"__all__"``: whether the episode is over.

PettingZoo's ``ParallelEnv`` (all live agents act at once) and turn-based
``AECEnv`` (one agent at a time) become this through `ParallelEnvAdapter` and
`TurnBasedEnvAdapter`; `as_multi_agent_env` picks the adapter. Observations
pass through unchanged (PettingZoo's classic games give dicts with
``observation`` and ``action_mask``; see `hrl_tasks.policies.policy_map` for
how policies see them).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.envs.make import EnvLike, MultiAgentEnvError, PettingZooSpec, env_name, resolve_env

AgentID = Hashable
ALL = "__all__"


class MultiAgentEnv:
    """Base class for a user's own multi-agent env (see the module doc for the protocol).

    Subclasses set ``possible_agents`` and the per-agent spaces (the
    ``observation_spaces`` and ``action_spaces`` dicts, or override
    `observation_space` and `action_space`), and write `reset` and `step`.
    """

    possible_agents: list[AgentID] = []
    observation_spaces: dict[AgentID, gym.Space] = {}
    action_spaces: dict[AgentID, gym.Space] = {}

    def observation_space(self, agent: AgentID) -> gym.Space:
        """The observation space of ``agent``."""
        return self.observation_spaces[agent]

    def action_space(self, agent: AgentID) -> gym.Space:
        """The action space of ``agent``."""
        return self.action_spaces[agent]

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, dict]]:
        """Starts an episode: the observations of the agents to act first, and infos."""
        raise NotImplementedError

    def step(self, actions: dict[AgentID, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """One step with an action for each agent of the last ``obs`` that is still in
        the episode; returns ``(obs, rewards, terminateds, truncateds, infos)``."""
        raise NotImplementedError

    def close(self) -> None:
        """Releases what the env holds."""


class _Wrapper(MultiAgentEnv):
    """What the adapters and wrappers share: the wrapped env, its agents and spaces."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)

    def observation_space(self, agent: AgentID) -> gym.Space:
        return self.env.observation_space(agent)

    def action_space(self, agent: AgentID) -> gym.Space:
        return self.env.action_space(agent)

    def close(self) -> None:
        self.env.close()


class ParallelEnvAdapter(_Wrapper):
    """A PettingZoo ``ParallelEnv`` as a `MultiAgentEnv`: every live agent acts each step.

    The episode is over when no agent is left (``env.agents`` is empty), or when
    every agent that was live finished at this step.
    """

    def reset(self, *, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return dict(obs), dict(infos)

    def step(self, actions):
        obs, rewards, terminateds, truncateds, infos = self.env.step(actions)
        terminateds, truncateds = dict(terminateds), dict(truncateds)
        finished = all(terminateds.get(a) or truncateds.get(a) for a in obs)
        over = not self.env.agents or finished
        truncated_all = over and all(truncateds.get(a) for a in obs) and bool(obs)
        terminateds[ALL], truncateds[ALL] = over and not truncated_all, truncated_all
        return dict(obs), dict(rewards), terminateds, truncateds, dict(infos)


class TurnBasedEnvAdapter(_Wrapper):
    """A PettingZoo ``AECEnv`` (turn-based) as a `MultiAgentEnv`.

    Each step has one agent to act: ``obs`` holds only ``env.agent_selection``,
    with its reward since its last action (what ``env.last()`` reports). When
    agents finish, each gets its last observation and reward in the same step:
    the adapter steps them out of the AEC env with ``None`` actions, as
    PettingZoo requires.
    """

    def reset(self, *, seed=None, options=None):
        self.env.reset(seed=seed, options=options)
        obs, _, _, _, infos = self._collect()
        return obs, infos

    def step(self, actions):
        agent = self.env.agent_selection
        if agent not in actions:
            raise ValueError(f"it is {agent!r}'s turn; the actions are for {sorted(actions)}")
        self.env.step(actions[agent])
        return self._collect()

    def _collect(self):
        """The next agent to act, after stepping out the agents that finished."""
        env = self.env
        obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        while env.agents:
            agent = env.agent_selection
            obs[agent] = env.observe(agent)
            # What env.last() reports for the agent to act; PettingZoo has no public reader of
            # another agent's cumulative reward.
            rewards[agent] = float(env._cumulative_rewards[agent])  # noqa: SLF001
            infos[agent] = dict(env.infos.get(agent, {}))
            done_t, done_u = bool(env.terminations[agent]), bool(env.truncations[agent])
            if not (done_t or done_u):
                break
            terminateds[agent], truncateds[agent] = done_t, done_u and not done_t
            env.step(None)  # a finished agent leaves the AEC env
        over = not env.agents
        truncated_all = over and bool(truncateds) and not any(terminateds.values())
        terminateds[ALL], truncateds[ALL] = over and not truncated_all, truncated_all
        return obs, rewards, terminateds, truncateds, infos


class CentralCriticEnv(_Wrapper):
    """Each agent's observation followed by the global state, for a centralized critic.

    The global state is the wrapped env's ``state()`` when it has one (PettingZoo
    envs may), else every agent's latest observation in ``possible_agents`` order
    (zeros for an agent not seen yet). Observations are flat float32 vectors in a
    `StateBox`: actor-critic policies act on the own part only and value the whole
    (MAPPO, Yu et al. 2022). Box observations only.

    Raises:
        UnsupportedSpaceError: for an agent whose observation space is not a Box.
    """

    def __init__(self, env: MultiAgentEnv) -> None:
        from hrl_tasks.policies.spaces import StateBox, UnsupportedSpaceError

        super().__init__(env)
        spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        for agent, space in spaces.items():
            if not isinstance(space, gym.spaces.Box):
                raise UnsupportedSpaceError(
                    f"a centralized critic needs Box observations; {agent!r} has {space!r}"
                )
        self._sizes = {agent: int(np.prod(space.shape)) for agent, space in spaces.items()}
        self._latest = {agent: np.zeros(n, np.float32) for agent, n in self._sizes.items()}
        env.reset()  # some envs have a state() only after a reset
        state = self._env_state()
        self._use_state = state is not None  # decided once: the space's size depends on it
        state_size = sum(self._sizes.values()) if state is None else state.size
        self._state_size = state_size
        self._spaces = {
            agent: StateBox(
                np.full(n + state_size, -np.inf, np.float32),
                np.full(n + state_size, np.inf, np.float32),
                n,
            )
            for agent, n in self._sizes.items()
        }

    def _env_state(self) -> np.ndarray | None:
        inner = getattr(self.env, "env", self.env)
        state = getattr(inner, "state", None)
        if not callable(state):
            return None
        try:
            return np.asarray(state(), np.float32).ravel()
        except Exception:  # an env whose state() needs a reset first, or has none
            return None

    def observation_space(self, agent: AgentID) -> gym.Space:
        return self._spaces[agent]

    def _augment(self, obs: dict) -> dict:
        for agent, observation in obs.items():
            self._latest[agent] = np.asarray(observation, np.float32).ravel()
        if self._use_state:
            state = self._env_state()
            if state is None or state.size != self._state_size:
                raise ValueError(
                    f"the env's state() gave {None if state is None else state.size} values "
                    f"after {self._state_size} at the start: a centralized critic needs a "
                    "state of fixed size"
                )
        else:
            state = np.concatenate([self._latest[agent] for agent in self.possible_agents])
        return {agent: np.concatenate([self._latest[agent], state]) for agent in obs}

    def reset(self, *, seed=None, options=None):
        self._latest = {agent: np.zeros(n, np.float32) for agent, n in self._sizes.items()}
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._augment(obs), infos

    def step(self, actions):
        obs, rewards, terminateds, truncateds, infos = self.env.step(actions)
        return self._augment(obs), rewards, terminateds, truncateds, infos


@dataclass(frozen=True, repr=False)
class CentralCritic:
    """A picklable creator: the env ``spec`` wrapped in `CentralCriticEnv`."""

    spec: Any

    def __call__(self, **env_config: Any) -> CentralCriticEnv:
        return CentralCriticEnv(make_multi_agent_env(self.spec, env_config))

    def __repr__(self) -> str:  # how messages call it (env_name)
        return f"{env_name(self.spec)}+central_critic"


def as_multi_agent_env(env: Any) -> MultiAgentEnv | None:
    """``env`` as a `MultiAgentEnv` (adapting PettingZoo's ``ParallelEnv`` and
    ``AECEnv``), or None when it is a single-agent (gymnasium) env."""
    if isinstance(env, MultiAgentEnv):
        return env
    if isinstance(env, gym.Env):
        return None
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:  # not a PettingZoo env then, and not a gymnasium one
        return None
    if isinstance(env, ParallelEnv):
        return ParallelEnvAdapter(env)
    if isinstance(env, AECEnv):
        return TurnBasedEnvAdapter(env)
    return None


def make_multi_agent_env(
    env: EnvLike, env_config: Mapping[str, Any] | None = None
) -> MultiAgentEnv:
    """Builds one multi-agent env from an env spec (a PettingZoo name, module path or
    `PettingZooSpec`: its ``parallel_env()`` when it has one, else its ``env()``), or
    from a callable returning a `MultiAgentEnv` or a PettingZoo env.

    Raises:
        MultiAgentEnvError: if the spec builds a single-agent (gymnasium) env.
        UnknownEnvError: for a spec that names no env.
    """
    spec = resolve_env(env)
    config = dict(env_config or {})
    if isinstance(spec, PettingZooSpec):
        try:
            made = spec.make_parallel(**config)
        except ValueError:  # turn-based: no parallel_env()
            made = spec.make(**config)
    elif callable(spec) and not isinstance(spec, str):
        made = spec(**config)
    else:
        made = None
    adapted = None if made is None else as_multi_agent_env(made)
    if adapted is None:
        raise MultiAgentEnvError(
            f"{env_name(env)!r} is not a multi-agent env: give a PettingZoo env (a name such as "
            "'tictactoe_v3' or a module path), or a creator returning a hrl_tasks MultiAgentEnv "
            "or a PettingZoo ParallelEnv/AECEnv"
        )
    return adapted


def is_multi_agent(env: EnvLike, env_config: Mapping[str, Any] | None = None) -> bool:
    """Whether ``env`` is a multi-agent env (a PettingZoo spec, or a creator returning
    a `MultiAgentEnv` or a PettingZoo env; a creator is called once to know)."""
    spec = resolve_env(env)
    if isinstance(spec, PettingZooSpec):
        return True
    if (
        isinstance(spec, str)
        or not callable(spec)
        or isinstance(spec, gym.envs.registration.EnvSpec)
    ):
        return False
    made = spec(**dict(env_config or {}))
    try:
        return as_multi_agent_env(made) is not None
    finally:
        made.close()
