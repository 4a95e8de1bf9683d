"""Files that an earlier version wrote (commit 1ae4fe5, before the layers moved).

A checkpoint names its algorithm and config, so that any version can rebuild it. A
search's ``search.pkl`` pickles its sampler and trial scheduler by module path; reading
it would run whatever code it names, so a resume refuses it, naming the one-off
conversion (``python -m hrl_tasks.tuning.convert DIR``) for a directory the user
trusts, which unpickles it once: those classes must stay importable where they were.
"""

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import hrl_tasks
from hrl_tasks.cli import main
from hrl_tasks.search import FIFOScheduler, RandomSampler, SearchError, loguniform
from hrl_tasks.tuning import convert
from hrl_tasks.tuning.state_file import STATE_FILE, read_decisions, read_search

FILES = Path(__file__).parent / "files" / "1ae4fe5"


def test_a_checkpoint_of_an_earlier_version_loads_and_acts():
    algo = hrl_tasks.load(FILES / "ppo-CartPole-v1")
    assert (algo.name, algo.iteration) == ("ppo", 2)
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=0)
    assert env.action_space.contains(algo.compute_single_action(observation))
    env.close()


@pytest.fixture
def earlier_search(tmp_path) -> Path:
    """A copy of the search the earlier version wrote: search.pkl and trials.json."""
    return Path(shutil.copytree(FILES / "search", tmp_path / "search"))


def test_resuming_a_search_of_an_earlier_version_is_refused_naming_the_conversion(
    earlier_search, capsys
):
    says = (
        r"written by an earlier version of hrl_tasks, whose decisions are in search\.pkl, "
        r"a pickle; .*python -m hrl_tasks\.tuning\.convert " + str(earlier_search)
    )
    with pytest.raises(SearchError, match=says):  # before any cluster starts
        hrl_tasks.tune("ppo", "CartPole-v1", out=earlier_search, resume=True)
    argv = ["tune", "ppo", "--env", "CartPole-v1", "--out", str(earlier_search), "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "search.pkl, a pickle" in err and "python -m hrl_tasks.tuning.convert" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in earlier_search.iterdir()) == ["search.pkl", "trials.json"]


def test_the_conversion_writes_the_state_file_that_a_resume_reads(earlier_search, capsys):
    assert convert.main([str(earlier_search)]) == 0
    assert f"wrote {earlier_search / STATE_FILE}" in capsys.readouterr().out
    decisions, trials = read_search(earlier_search)
    assert isinstance(decisions["sampler"], RandomSampler)
    assert isinstance(decisions["scheduler"], FIFOScheduler)
    assert decisions["stop"] == {"iteration": 2} and decisions["exhausted"]
    # Its sampler had proposed both trials of its space; it proposes no third.
    assert decisions["sampler"].suggest("0002") is None
    assert decisions["sampler"].to_state()["space"]["lr"]["domain"] == loguniform.__name__
    # Checkpoints are named within the search's directory, not where it was written.
    assert [t["checkpoint"] for t in trials] == [
        f"trials/000{i}/checkpoints/checkpoint-000002.hrl" for i in range(2)
    ]
    assert json.loads((earlier_search / "trials.json").read_text()) == trials
    assert convert.main([str(earlier_search)]) == 2  # once only
    assert "needs no conversion" in capsys.readouterr().err
    assert read_decisions(earlier_search)["time_attr"] == "iteration"


def test_the_conversion_of_a_directory_without_a_search_says_so(tmp_path, capsys):
    assert convert.main([str(tmp_path)]) == 2
    assert "holds no search.pkl: there is nothing to convert" in capsys.readouterr().err
