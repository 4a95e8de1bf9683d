"""Rooms joined by doors, flat and as a hierarchy of a high-level and low-level agent."""

from collections import deque

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import PPO
from hrl_tasks.envs.multi_agent import ALL
from hrl_tasks.envs.rooms import (
    HIGH,
    HierarchicalRooms,
    Rooms,
    RoomsLayout,
    hierarchical_rooms,
    high_or_low,
)
from hrl_tasks.policies.policy_map import PolicySpec

UP, DOWN, LEFT, RIGHT = range(4)
NORTH, SOUTH, WEST, EAST, CENTRE = range(5)


def shortest_path(layout: RoomsLayout) -> int:
    seen, queue = {tuple(layout.start): 0}, deque([tuple(layout.start)])
    while queue:
        cell = queue.popleft()
        for action in range(4):
            nxt = tuple(layout.move(np.array(cell), action))
            if nxt not in seen:
                seen[nxt] = seen[cell] + 1
                queue.append(nxt)
    return seen[tuple(layout.goal)]


def test_the_rooms_are_joined_by_one_door_per_wall_and_the_goal_is_far():
    layout = RoomsLayout(rooms=4, size=5)
    assert shortest_path(layout) == 36
    assert layout.free.sum() == 16 * 25 + 2 * 4 * 3  # cells of the rooms, plus 24 doorways
    assert layout.door((0, 0), NORTH) is None and layout.door((0, 0), WEST) is None
    assert layout.room_of(layout.door((0, 0), EAST)) is None  # a doorway is in no room
    with pytest.raises(ValueError, match="odd size"):
        RoomsLayout(rooms=2, size=4)


def test_the_flat_task_pays_one_at_the_goal_and_ends_at_500_steps():
    env = Rooms()
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs, [3 / 24, 3 / 24])
    for _ in range(10):  # a wall stops the agent
        obs, reward, terminated, truncated, _ = env.step(UP)
    np.testing.assert_allclose(obs, [1 / 24, 3 / 24])
    steps = 10
    while True:
        _, reward, terminated, truncated, _ = env.step(UP)
        steps += 1
        if terminated or truncated:
            break
    assert (steps, reward, terminated, truncated) == (500, 0.0, False, True)


def walk_to(env: HierarchicalRooms, agent: str, actions):
    """Steps ``agent`` with ``actions``; returns the last step's results."""
    for action in actions:
        result = env.step({agent: action})
    return result


def test_an_option_ends_in_the_next_room_with_the_low_levels_reward():
    env = HierarchicalRooms()
    obs, _ = env.reset()
    assert list(obs) == [HIGH] and obs[HIGH].tolist() == [1, 0, 0, 0, 1, 0, 0, 0]
    obs, rewards, terminateds, truncateds, _ = env.step({HIGH: EAST})
    assert list(obs) == ["low_level_0"]
    np.testing.assert_allclose(obs["low_level_0"], [0.0, 3 / 6, 0, 0, 0, 1, 0])  # door 3 east
    obs, rewards, terminateds, truncateds, _ = walk_to(env, "low_level_0", [RIGHT] * 4)
    assert set(obs) == {"low_level_0", HIGH}  # the option ended: the high level picks again
    assert terminateds["low_level_0"] and not terminateds[ALL]
    assert rewards["low_level_0"] == pytest.approx(0.99) and rewards[HIGH] == 0.0
    assert obs[HIGH].tolist() == [1, 0, 0, 0, 0, 1, 0, 0]  # room (0, 1)
    obs, *_ = env.step({HIGH: SOUTH})
    assert list(obs) == ["low_level_1"]  # each option is its own trajectory


def test_an_option_that_runs_out_of_steps_is_truncated_and_a_wall_option_costs_a_step():
    env = HierarchicalRooms(option_steps=3)
    env.reset()
    obs, rewards, terminateds, truncateds, _ = env.step({HIGH: NORTH})  # the grid's edge
    assert list(obs) == [HIGH] and env.flat.steps == 1 and not truncateds[HIGH]
    env.step({HIGH: SOUTH})
    obs, rewards, terminateds, truncateds, _ = walk_to(env, "low_level_0", [LEFT] * 3)
    assert truncateds["low_level_0"] and not terminateds["low_level_0"] and HIGH in obs
    assert rewards["low_level_0"] == pytest.approx(-0.01)


def test_reaching_the_goal_ends_the_episode_for_both_levels_and_pays_the_high_one():
    env = HierarchicalRooms(rooms=2, size=3)  # goal: the centre of room (1, 1)
    env.reset()
    env.step({HIGH: EAST})
    walk_to(env, "low_level_0", [RIGHT, RIGHT, RIGHT])
    env.step({HIGH: SOUTH})  # from (2, 5): the door south of room (0, 1) is at (4, 6)
    obs, rewards, *_ = walk_to(env, "low_level_1", [RIGHT, DOWN, DOWN, DOWN])
    assert rewards["low_level_1"] == pytest.approx(0.99) and rewards[HIGH] == 0.0
    obs, *_ = env.step({HIGH: CENTRE})  # in room (1, 1) at (5, 6); its centre is (6, 6)
    np.testing.assert_allclose(obs["low_level_2"], [1 / 4, 0.0, 0, 0, 0, 0, 1])
    obs, rewards, terminateds, truncateds, _ = env.step({"low_level_2": DOWN})
    assert terminateds[ALL] and terminateds[HIGH] and rewards[HIGH] == 1.0
    assert set(obs) == {"low_level_2", HIGH} and terminateds["low_level_2"]


@pytest.mark.cluster
def test_both_levels_learn_in_one_multi_agent_flow(engine, tmp_path):
    config = {"env": hierarchical_rooms, "env_config": {"rooms": 2, "size": 3, "max_steps": 100},
              "policies": {"high": PolicySpec(), "low": PolicySpec()},
              "policy_mapping_fn": high_or_low, "num_workers": 2, "num_envs_per_worker": 2,
              "rollout_fragment_length": 32, "train_batch_size": 256, "minibatch_size": 128,
              "num_sgd_iter": 2, "seed": 0}  # fmt: skip
    algo = PPO(config, engine=engine)
    try:
        assert algo.policy["high"].observation_space.shape == (4,)
        assert algo.policy["low"].observation_space.shape == (7,)
        result = [algo.train() for _ in range(2)][-1]
        assert {"high/total", "low/total"} <= set(result["info"])
        assert {"policy_return_mean/high", "policy_return_mean/low"} <= set(result)
        path = algo.save(tmp_path / "checkpoint.hrl")
    finally:
        algo.stop()
    loaded = hrl_tasks.load(path, env=hierarchical_rooms)  # each policy's agent is saved
    low_view = HierarchicalRooms(rooms=2, size=3).low_space.sample()
    assert 0 <= loaded.compute_single_action(low_view, policy_id="low") < 4
    assert 0 <= loaded.compute_single_action(np.zeros(4, np.float32), policy_id="high") < 5
