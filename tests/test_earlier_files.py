"""Files that an earlier version wrote (commit 1ae4fe5, before the layers moved) still load.

A checkpoint names its algorithm and config, so that any version can rebuild it; a
search's ``search.pkl`` pickles its sampler and trial scheduler by module path, so those
classes must stay importable where they were.
"""

from pathlib import Path

import gymnasium as gym

import hrl_tasks
from hrl_tasks.search import FIFOScheduler, RandomSampler, loguniform
from hrl_tasks.tuning.runner import read_decisions

FILES = Path(__file__).parent / "files" / "1ae4fe5"


def test_a_checkpoint_of_an_earlier_version_loads_and_acts():
    algo = hrl_tasks.load(FILES / "ppo-CartPole-v1")
    assert (algo.name, algo.iteration) == ("ppo", 2)
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=0)
    assert env.action_space.contains(algo.compute_single_action(observation))
    env.close()


def test_a_search_of_an_earlier_version_unpickles_with_its_decisions():
    decisions = read_decisions(FILES / "search")
    assert isinstance(decisions["sampler"], RandomSampler)
    assert isinstance(decisions["scheduler"], FIFOScheduler)
    assert decisions["stop"] == {"iteration": 2} and decisions["exhausted"]
    # Its sampler had proposed both trials of its space; it proposes no third.
    assert decisions["sampler"].suggest("0002") is None
    assert isinstance(decisions["sampler"]._space["lr"], loguniform)
