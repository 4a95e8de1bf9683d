"""Rooms joined by doors: a long-horizon task, flat and as a two-level hierarchy.

`Rooms` is a gymnasium env: a ``rooms x rooms`` grid of square rooms of
``size x size`` cells, walls between them with one door in the middle of each
shared wall. The agent starts in the centre of the first room (top left) and
must reach the centre of the last one (bottom right) within ``max_steps``
(500): reward 1 there, 0 everywhere else. Observations: the position, scaled
to [0, 1]. Actions: up, down, left, right (walking into a wall stays put).

`HierarchicalRooms` is the same task as a `MultiAgentEnv` with two levels
(as RLlib's hierarchical example, a multi-agent env with a high-level and a
low-level agent):

* ``high_level`` picks an option when the episode starts and whenever the
  current option ends: go through the door north, south, west or east of the
  current room, or go to its centre (where the goal is, in the last room). It sees which room it is in and is paid the env's reward. An
  option towards the grid's edge fails at once and costs a step.
* ``low_level_<n>`` carries out option ``n``: it sees where its target (the
  door, or the centre) is from where it stands (the offset, scaled) and which
  option it carries out (one-hot), and is paid 1 for arriving (in the room
  behind the door, or at the centre), minus 0.01 a step. An option ends on
  arrival or after ``option_steps`` steps, whichever comes first; then a new
  low-level agent id starts, so each option is its own trajectory.

Both levels are ordinary policies of one multi-agent flow:
``policies={"high": ..., "low": ...}`` and a mapping on the agent id's prefix.

    register: import hrl_tasks.envs.rooms makes "Rooms-v0" a gymnasium id
    (the env spec "hrl_tasks.envs.rooms:Rooms-v0" imports it first).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.envs.multi_agent import ALL, MultiAgentEnv

MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])  # up, down, left, right (row, column)
HIGH = "high_level"
CENTRE = 4  # the high level's fifth option: the centre of the current room
OPTIONS = 5


class RoomsLayout:
    """The grid: walls, doors, where a cell is, and the start and goal cells."""

    def __init__(self, rooms: int = 4, size: int = 5) -> None:
        if rooms < 2 or size < 3 or size % 2 == 0:
            raise ValueError(f"need rooms >= 2 and an odd size >= 3; got {rooms}, {size}")
        self.rooms, self.size = rooms, size
        self.side = rooms * (size + 1) + 1  # cells, walls included
        self.free = np.zeros((self.side, self.side), bool)
        for r in range(rooms):
            for c in range(rooms):
                top, left = self.corner(r, c)
                self.free[top : top + size, left : left + size] = True
        middle = size // 2
        for r in range(rooms):
            for c in range(rooms):
                top, left = self.corner(r, c)
                if r + 1 < rooms:  # the door south of room (r, c)
                    self.free[top + size, left + middle] = True
                if c + 1 < rooms:  # the door east of room (r, c)
                    self.free[top + middle, left + size] = True
        self.start = self.centre(0, 0)
        self.goal = self.centre(rooms - 1, rooms - 1)

    def corner(self, r: int, c: int) -> tuple[int, int]:
        return 1 + r * (self.size + 1), 1 + c * (self.size + 1)

    def centre(self, r: int, c: int) -> np.ndarray:
        top, left = self.corner(r, c)
        return np.array([top + self.size // 2, left + self.size // 2])

    def room_of(self, cell: np.ndarray) -> tuple[int, int] | None:
        """The room a cell is in; None in a doorway."""
        r, rr = divmod(int(cell[0]) - 1, self.size + 1)
        c, cc = divmod(int(cell[1]) - 1, self.size + 1)
        return None if rr == self.size or cc == self.size else (r, c)

    def door(self, room: tuple[int, int], option: int) -> np.ndarray | None:
        """The doorway cell of ``option`` (0 north, 1 south, 2 west, 3 east) from
        ``room``; None where the grid ends."""
        r, c = room
        dr, dc = MOVES[option]
        if not (0 <= r + dr < self.rooms and 0 <= c + dc < self.rooms):
            return None
        top, left = self.corner(r, c)
        middle = self.size // 2
        return np.array(
            [
                (top - 1, left + middle),
                (top + self.size, left + middle),
                (top + middle, left - 1),
                (top + middle, left + self.size),
            ][option]
        )

    def move(self, cell: np.ndarray, action: int) -> np.ndarray:
        target = cell + MOVES[action]
        return target if self.free[target[0], target[1]] else cell


class Rooms(gym.Env):
    """The flat task (see the module doc)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, rooms: int = 4, size: int = 5, max_steps: int = 500) -> None:
        self.layout = RoomsLayout(rooms, size)
        self.max_steps = int(max_steps)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.cell = self.layout.start.copy()
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return (self.cell / (self.layout.side - 1)).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cell, self.steps = self.layout.start.copy(), 0
        return self._obs(), {}

    def step(self, action):
        self.cell = self.layout.move(self.cell, int(action))
        self.steps += 1
        reached = bool((self.cell == self.layout.goal).all())
        return (
            self._obs(),
            float(reached),
            reached,
            self.steps >= self.max_steps and not reached,
            {},
        )


class HierarchicalRooms(MultiAgentEnv):
    """The task as a high-level and a low-level agent (see the module doc)."""

    def __init__(
        self, rooms: int = 4, size: int = 5, max_steps: int = 500, option_steps: int = 25
    ) -> None:
        self.flat = Rooms(rooms, size, max_steps)
        self.layout = self.flat.layout
        self.option_steps = int(option_steps)
        self.possible_agents = [HIGH, "low_level"]  # low-level ids carry a counter
        self.high_space = gym.spaces.Box(0.0, 1.0, (2 * rooms,), np.float32)
        self.low_space = gym.spaces.Box(-1.0, 1.0, (2 + OPTIONS,), np.float32)
        self.option_count = 0
        self.option: int | None = None

    def observation_space(self, agent):
        return self.high_space if agent == HIGH else self.low_space

    def action_space(self, agent):
        return gym.spaces.Discrete(OPTIONS if agent == HIGH else 4)

    def _high_obs(self) -> np.ndarray:
        room = self.layout.room_of(self.flat.cell) or self.room
        one_hot = np.zeros(self.high_space.shape, np.float32)
        one_hot[room[0]], one_hot[self.layout.rooms + room[1]] = 1.0, 1.0
        return one_hot

    def _low_obs(self) -> np.ndarray:
        """Where the target door is from here (scaled), and which way the option goes."""
        offset = np.clip((self.target_cell - self.flat.cell) / (self.layout.size + 1), -1.0, 1.0)
        direction = np.zeros(OPTIONS, np.float32)
        direction[self.option] = 1.0
        return np.concatenate([offset.astype(np.float32), direction])

    @property
    def low_agent(self) -> str:
        return f"low_level_{self.option_count}"

    def reset(self, *, seed=None, options=None):
        self.flat.reset(seed=seed)
        self.room, self.option, self.option_count = (0, 0), None, 0
        self.high_reward = 0.0
        return {HIGH: self._high_obs()}, {HIGH: {}}

    def step(self, actions):
        if HIGH in actions:
            return self._choose(int(actions[HIGH]))
        return self._walk(int(actions[self.low_agent]))

    def _choose(self, option: int):
        """The high level picks an option; the low level starts it (a wall ends it at once)."""
        self.room = self.layout.room_of(self.flat.cell) or self.room
        door = (
            self.layout.centre(*self.room)
            if option == CENTRE
            else self.layout.door(self.room, option)
        )
        if door is None:  # no room that way: the option fails, costing a step
            self.flat.steps += 1
            over = self.flat.steps >= self.flat.max_steps
            obs, rewards = {HIGH: self._high_obs()}, {HIGH: 0.0}
            return obs, rewards, {HIGH: False, ALL: False}, {HIGH: over, ALL: over}, {}
        self.option, self.target_cell, self.option_used = option, door, 0
        if option != CENTRE:
            self.target_room = tuple(int(x) for x in np.array(self.room) + MOVES[option])
        return {self.low_agent: self._low_obs()}, {}, {ALL: False}, {ALL: False}, {}

    def _walk(self, action: int):
        agent = self.low_agent
        _, reward, terminated, truncated, _ = self.flat.step(action)
        self.high_reward += reward
        self.option_used += 1
        if self.option == CENTRE:
            arrived = bool((self.flat.cell == self.target_cell).all())
        else:
            arrived = self.layout.room_of(self.flat.cell) == self.target_room
        low_reward = (1.0 if arrived else 0.0) - 0.01
        if terminated or truncated:  # the episode ends for both levels
            obs = {agent: self._low_obs(), HIGH: self._high_obs()}
            rewards = {agent: low_reward, HIGH: self.high_reward}
            done = {agent: terminated or arrived, HIGH: terminated, ALL: terminated}
            cut = {agent: truncated and not arrived, HIGH: truncated, ALL: truncated}
            return obs, rewards, done, cut, {}
        if arrived or self.option_used >= self.option_steps:  # the option ends
            self.option_count += 1
            rewards, self.high_reward = {agent: low_reward, HIGH: self.high_reward}, 0.0
            obs = {agent: self._low_obs(), HIGH: self._high_obs()}
            done = {agent: arrived, ALL: False}
            cut = {agent: not arrived, ALL: False}
            return obs, rewards, done, cut, {}
        return {agent: self._low_obs()}, {agent: low_reward}, {ALL: False}, {ALL: False}, {}


def hierarchical_rooms(**config: Any) -> HierarchicalRooms:
    """A creator for the env spec: ``env=hierarchical_rooms``."""
    return HierarchicalRooms(**config)


def high_or_low(agent_id: str, episode: Any) -> str:
    """The mapping of `HierarchicalRooms`' agents to policies ``"high"`` and ``"low"``."""
    return "high" if agent_id == HIGH else "low"


gym.register("Rooms-v0", entry_point=Rooms)
