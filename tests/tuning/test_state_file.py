"""A search's state file: what it holds, how it is written, and a resume from it alone.

The searches here propose and end trials without a cluster (`Search.new_trial` and
`Search.end` are the driver's own decisions); the cluster's part of a resume is in
test_tune.py.
"""

import json
import math
import shutil

import numpy as np
import pytest

from hrl_tasks.algorithms.checkpoint import FORMAT as CHECKPOINT
from hrl_tasks.run_dir import write_atomically
from hrl_tasks.search import (
    ASHAScheduler,
    FIFOScheduler,
    PBTScheduler,
    SearchError,
    choice,
    grid,
    loguniform,
    make_sampler,
    randint,
    uniform,
)
from hrl_tasks.tuning.runner import ERROR, TERMINATED, Search, trial_stop
from hrl_tasks.tuning.state_file import (
    FORMAT,
    STATE_FILE,
    TRIALS_FILE,
    check_resumable,
    read_decisions,
    read_search,
    state_text,
)

SAMPLERS = {  # each proposes 12 configs of PPO's: (space, num_samples)
    "random": (
        {"lr": loguniform(1e-4, 1e-2), "gamma": uniform(0.9, 0.99), "clip": grid([0.1, 0.3])},
        6,
    ),
    "grid": ({"lr": grid([1e-4, 1e-3, 1e-2]), "clip": choice([0.1, 0.3])}, 2),
    "optuna": (
        {"lr": loguniform(1e-4, 1e-2), "num_sgd_iter": randint(1, 5), "clip": choice([0.1, 0.3])},
        12,
    ),
}


def new_search(sampler: str, out, scheduler=None, stop=None) -> Search:
    """A search of PPO's config with ``SAMPLERS[sampler]``, writing to ``out``."""
    if sampler == "optuna":
        pytest.importorskip("optuna")
    space, num_samples = SAMPLERS[sampler]
    proposer = make_sampler(sampler, space, num_samples, seed=3, metric="episode_return_mean")
    scheduler = scheduler or ASHAScheduler(max_t=8, grace_period=2)
    return Search(sampler=proposer, scheduler=scheduler, out=out, **settings(stop))


def settings(stop=None) -> dict:
    """What `Search` takes besides its sampler, scheduler and out (as `tune` gives it)."""
    return dict(
        algorithm="ppo",
        config={"env": "CartPole-v1"},
        metric="episode_return_mean",
        mode="max",
        stop=stop or {"iteration": 8},
        trial_resources={},
        max_concurrent=None,
        engine=None,
        checkpoint_interval_s=60.0,
        max_failures=0,
        reporter=None,
    )


def propose(search: Search, count: int) -> list[dict]:
    """Propose ``count`` trials (fewer if the sampler runs out); each ends, with a score
    of its config, once the next one is proposed, as in a search one runs meanwhile."""
    configs = []
    for _ in range(count):
        running = [t for t in search.trials.values() if t.status == "PENDING"]
        trial = search.new_trial()
        if trial is None:
            break
        configs.append(trial.config)
        for earlier in running:
            earlier.best = -math.log10(earlier.config["lr"]) * 10.0
            search.end(earlier, TERMINATED)
    return configs


@pytest.mark.parametrize("sampler", ["random", "grid", "optuna"])
def test_a_resumed_search_proposes_what_it_would_have_from_its_state_file_alone(sampler, tmp_path):
    whole = propose(new_search(sampler, tmp_path / "whole"), 20)
    assert len(whole) == 12
    first = new_search(sampler, tmp_path / "first")
    configs = propose(first, 5)
    first.save_trials()
    (tmp_path / "first" / TRIALS_FILE).unlink()  # a resume reads the state file alone
    again = Search.resume(tmp_path / "first", **settings())
    assert [t.status for t in again.trials.values()] == [TERMINATED] * 4 + ["PENDING"]
    assert propose(again, 20) == whole[5:] and configs == whole[:5]
    assert again.exhausted and again.new_trial() is None


def test_the_state_file_holds_the_decisions_then_a_trial_a_line(tmp_path):
    stop = {"iteration": 8, "loss": ("<=", 0.5)}
    search = new_search("random", tmp_path, PBTScheduler(SAMPLERS["random"][0], 2), stop)
    propose(search, 3)
    search.save_trials()
    text = (tmp_path / STATE_FILE).read_text()
    state = json.loads(text)
    keys = ["format", "stop", "time_attr", "exhausted", "sampler", "scheduler", "trials"]
    assert state["format"] == FORMAT and list(state) == keys
    assert state["stop"] == {"iteration": 8, "loss": {"__tuple__": ["<=", 0.5]}}
    assert state["sampler"]["kind"] == "random" and state["scheduler"]["kind"] == "pbt"
    lines = ",\n".join(json.dumps(r) for r in state["trials"])  # a trial a line
    assert text.endswith(f'"trials": [\n{lines}\n ]\n}}\n') and len(state["trials"]) == 3
    assert json.loads((tmp_path / TRIALS_FILE).read_text()) == state["trials"]
    decisions = read_decisions(tmp_path)
    assert decisions["stop"] == stop and trial_stop(None, tmp_path, resume=True) == stop
    assert decisions["scheduler"].to_state() == search.scheduler.to_state()
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_an_empty_search_and_state_text_read_back():
    decisions = {"format": FORMAT, "stop": {}}
    assert json.loads(state_text(decisions, [])) == {**decisions, "trials": []}
    lines = [b'{"trial_id": "0000"}', b'{"trial_id": "0001"}']
    trials = json.loads(state_text(decisions, lines))["trials"]
    assert trials == [{"trial_id": "0000"}, {"trial_id": "0001"}]


def test_a_search_moved_elsewhere_resumes_its_trials_from_their_checkpoints(tmp_path):
    search = new_search("random", tmp_path / "here", FIFOScheduler())
    paused, ended = search.new_trial(), search.new_trial()
    for trial, weights in ((paused, [1.0, 2.0]), (ended, [3.0])):
        trial.state = {"format": CHECKPOINT, "iteration": 2, "weights": np.array(weights)}
        trial.iterations = 2
        search.save_checkpoint(trial)
    assert paused.checkpoint == "trials/0000/checkpoints/checkpoint-000002.hrl"
    search.end(ended, ERROR)
    search.pause(paused)
    shutil.move(tmp_path / "here", tmp_path / "there")
    there = tmp_path / "there"
    crashed = [
        there / ".search.json.77-0123456789ab.tmp",
        there / "trials/0000/checkpoints/.checkpoint-000004.hrl.tmp-77",
    ]
    for path in crashed:
        path.write_bytes(b"a write its process did not finish")
    again = Search.resume(tmp_path / "there", **settings())
    assert not any(path.exists() for path in crashed)
    trial = again.trials["0000"]
    assert trial.status == "PAUSED" and trial.state["weights"].tolist() == [1.0, 2.0]
    checkpoints = {t["trial_id"]: t["checkpoint"] for t in again.result().trials}
    assert checkpoints == {
        "0000": str(tmp_path / "there" / "trials/0000/checkpoints/checkpoint-000002.hrl"),
        "0001": str(tmp_path / "there" / "trials/0001/checkpoints/checkpoint-000002.hrl"),
    }


def test_nothing_to_resume_and_a_state_file_of_another_kind_are_refused(tmp_path):
    with pytest.raises(SearchError, match="nothing to resume in .*: it holds no search.json"):
        check_resumable(tmp_path)
    with pytest.raises(SearchError, match="nothing to resume in None"):
        check_resumable(None)
    (tmp_path / STATE_FILE).write_text('{"format": "hrl_tasks.search/9"}')
    with pytest.raises(SearchError, match="holds 'hrl_tasks.search/9', not a search's state"):
        read_search(tmp_path)
    (tmp_path / STATE_FILE).write_text('{"format": "hrl_tasks.search/1", "trials": []}')
    with pytest.raises(SearchError, match="is not whole: KeyError"):
        read_search(tmp_path)
    (tmp_path / STATE_FILE).write_text('{"format": ')
    with pytest.raises(SearchError, match="is not a search's state file"):
        read_search(tmp_path)


def test_an_atomic_write_replaces_the_file_whole_or_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "search.json"
    write_atomically(path, b"first")
    write_atomically(path, b"second")
    assert path.read_bytes() == b"second"
    with pytest.raises(TypeError):
        write_atomically(path, "not bytes")  # fails while writing its temporary file
    assert path.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == [path.name]
