"""Small multi-agent envs for the tests: agents that finish at different times."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from hrl_tasks.envs.multi_agent import ALL, MultiAgentEnv


class Race(MultiAgentEnv):
    """Agent ``i`` must step ``i + 2`` times; each step pays 1 and action 1 pays 1 more.

    Agents finish at different times (``runner_0`` first), each with its own
    last observation; the episode ends when the last one finishes. Observations
    are the agent's remaining steps.
    """

    def __init__(self, agents: int = 3) -> None:
        self.possible_agents = [f"runner_{i}" for i in range(agents)]
        box = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
        self.observation_spaces = {agent: box for agent in self.possible_agents}
        self.action_spaces = {agent: gym.spaces.Discrete(2) for agent in self.possible_agents}
        self.left: dict[str, int] = {}

    def reset(self, *, seed=None, options=None):
        self.left = {agent: i + 2 for i, agent in enumerate(self.possible_agents)}
        return {a: self._obs(a) for a in self.left}, {a: {} for a in self.left}

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.left[agent]], np.float32)

    def step(self, actions):
        rewards, terminateds, obs = {}, {}, {}
        for agent, action in actions.items():
            self.left[agent] -= 1
            rewards[agent] = 1.0 + float(action)
            obs[agent] = self._obs(agent)
            terminateds[agent] = self.left[agent] == 0
        self.left = {a: n for a, n in self.left.items() if n > 0}
        terminateds[ALL] = not self.left
        return obs, rewards, terminateds, {ALL: False}, {a: {} for a in obs}


def race() -> Race:
    return Race()


class EndTogether(MultiAgentEnv):
    """Two agents for three steps; the end says only ``"__all__"`` (RLlib's way)."""

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        box = gym.spaces.Box(0.0, 3.0, (1,), np.float32)
        self.observation_spaces = {agent: box for agent in self.possible_agents}
        self.action_spaces = {agent: gym.spaces.Discrete(2) for agent in self.possible_agents}
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {a: np.zeros(1, np.float32) for a in self.possible_agents}, {}

    def step(self, actions):
        self.t += 1
        obs = {a: np.full(1, self.t, np.float32) for a in actions}
        return obs, {a: 1.0 for a in actions}, {ALL: self.t == 3}, {ALL: False}, {}
