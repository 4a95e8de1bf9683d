"""`hrl_tasks.tune` on a real cluster: trials as tasks, schedulers, resources, resume, faults."""

import csv
import json
import math
import os
import signal
import threading

import pytest

import hrl_tasks
from hrl_tasks.algorithms import ConfigError
from hrl_tasks.search import (
    ASHAScheduler,
    FIFOScheduler,
    PBTScheduler,
    SearchError,
    choice,
    grid,
    loguniform,
    make_sampler,
)
from hrl_tasks.tuning.runner import EndedTrial, Search, Trial, TuneResult, fits

TINY = {"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 32,
        "train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}  # fmt: skip
KEYS = {"trial_id", "config", "last", "best", "iterations", "env_steps", "status",
        "start_time", "end_time", "checkpoint"}  # fmt: skip


def most_at_once(trials) -> int:
    """The most chunks of different trials that ran at the same moment."""
    edges = sorted(
        (t, +1 if i == 0 else -1)
        for trial in trials
        for start, end, _ in trial["chunks"]
        for i, t in enumerate((start, end))
    )
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


# --- pure --------------------------------------------------------------------------------


def test_bundles_fit_only_when_every_request_has_room_at_once():
    capacity = {"a": {"CPU": 1}, "b": {"CPU": 1, "GPU": 1}}
    assert fits([[{"CPU": 1}, {}], [{"CPU": 1}]], capacity)
    assert not fits([[{"CPU": 1}]] * 3, capacity)
    assert fits([[{"GPU": 1}, {"CPU": 1}]], capacity)
    assert not fits([[{"GPU": 1}], [{"GPU": 1}]], capacity)
    assert fits([[{}]] * 100, capacity)  # nothing requested, nothing held


def test_the_best_trial_follows_the_mode_and_skips_trials_without_a_value():
    trials = [{"trial_id": str(i), "best": b, "config": {"lr": i}, "checkpoint": f"c{i}"}
              for i, b in enumerate([1.0, None, 3.0, math.nan])]  # fmt: skip
    assert TuneResult(trials, "m", "max").best_config == {"lr": 2}
    assert TuneResult(trials, "m", "max", fixed={"lr": 0, "gamma": 0.9}).best_config == {
        "lr": 2, "gamma": 0.9,
    }  # fmt: skip
    assert TuneResult(trials, "m", "min").best_checkpoint == "c0"
    assert TuneResult(trials[1:2], "m", "max").best_trial is None


def test_an_ended_trial_is_kept_as_its_record_and_its_curve_read_from_its_metrics(tmp_path):
    """A search may run many thousands of trials: the driver keeps an ended trial's
    record as one JSON string (what trials.json holds), and its curve only on disk,
    whence the plot of every curve reads it."""
    space = {"lr": loguniform(1e-4, 1e-2)}
    search = Search(
        "ppo", {"env": "CartPole-v1"}, make_sampler("random", space, 1, seed=0),
        FIFOScheduler(), metric="episode_return_mean", mode="max", stop={},
        trial_resources={}, max_concurrent=None, engine=None, out=tmp_path,
        checkpoint_interval_s=60.0, max_failures=0, reporter=None,
    )  # fmt: skip
    trial = search.trials["0000"] = Trial("0000", {"lr": 1e-3})
    for i, value in enumerate([10.0, 30.0, 20.0], start=1):
        search.record(trial, {"iteration": i, "env_steps_sampled": 64 * i,
                              "episode_return_mean": value})  # fmt: skip
    running = list(search.curve(trial))
    search.end(trial, "TERMINATED")
    ended = search.trials["0000"]
    assert isinstance(ended, EndedTrial) and ended.curve is None and ended.state is None
    assert ended.record() == trial.record() and isinstance(ended.text, bytes)
    assert (ended.best, ended.config, ended.last["iteration"]) == (30.0, {"lr": 1e-3}, 3)
    assert search.curve(ended) == running == [(64, 10.0), (128, 30.0), (192, 20.0)]
    assert json.loads((tmp_path / "trials.json").read_text()) == [trial.record()]
    search.write_summary()
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_a_key_the_algorithm_lacks_fails_before_any_cluster_starts():
    with pytest.raises(ConfigError, match="'lrr'.*did you mean 'lr'"):
        hrl_tasks.tune("ppo", "CartPole-v1", space={"lrr": loguniform(1e-4, 1e-2)})
    with pytest.raises(ConfigError, match="lr"):
        hrl_tasks.tune("ppo", "CartPole-v1", config={"lr": -1.0})
    with pytest.raises(SearchError, match="unknown scheduler 'hyperband'"):
        hrl_tasks.tune("ppo", "CartPole-v1", scheduler="hyperband")


# --- on a cluster ------------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_fifo_runs_every_trial_to_its_stop_and_writes_what_users_read(engine, tmp_path):
    space = {"lr": grid([1e-3, 3e-3]), "clip": choice([0.1, 0.3])}
    result = hrl_tasks.tune("ppo", "CartPole-v1", space=space, config=TINY, num_samples=2,
                            stop={"iteration": 3}, out=tmp_path,
                            engine=engine)  # fmt: skip
    assert len(result.trials) == 4
    for trial in result.trials:
        assert set(trial) >= KEYS
        assert trial["status"] == "TERMINATED" and trial["iterations"] == 3
        assert trial["end_time"] >= trial["start_time"] and trial["env_steps"] >= 3 * 64
        assert {"lr", "clip"} == set(trial["config"]) and os.path.exists(trial["checkpoint"])
        lines = (tmp_path / "trials" / trial["trial_id"] / "metrics.jsonl").read_text()
        assert [json.loads(x)["iteration"] for x in lines.splitlines()] == [1, 2, 3]
    assert sorted(t["config"]["lr"] for t in result.trials) == [1e-3, 1e-3, 3e-3, 3e-3]
    best = max(result.trials, key=lambda t: t["best"])
    assert result.best_config == {**TINY, "env": "CartPole-v1", **best["config"]}
    assert result.best_checkpoint == best["checkpoint"]
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["trial_id"] for r in rows] == [t["trial_id"] for t in result.trials]
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    # Each trial's task holds one CPU slot; the two workers declare one each.
    assert most_at_once(result.trials) <= 2
    restored = hrl_tasks.load(result.best_checkpoint)
    assert restored.compute_single_action([0.0, 0.0, 0.0, 0.0]) in (0, 1)


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_asha_stops_trials_at_a_rung_and_they_release_their_workers(engine):
    asha = ASHAScheduler(max_t=8, grace_period=2, reduction_factor=2)
    space = {"lr": loguniform(1e-5, 1e-2)}
    result = hrl_tasks.tune("ppo", "CartPole-v1", space=space, config=TINY, num_samples=4,
                            scheduler=asha, stop={"iteration": 8}, engine=engine,
                            seed=1)  # fmt: skip
    statuses = {t["status"] for t in result.trials}
    assert "STOPPED" in statuses and statuses <= {"STOPPED", "TERMINATED"}
    for trial in result.trials:
        if trial["status"] == "STOPPED":
            assert trial["iterations"] in asha.rungs
        else:
            assert trial["iterations"] == 8
    # Nothing of a stopped trial keeps running: every stateful worker is gone.
    assert all(not held for held in _held_by_objects(engine).values())


def _held_by_objects(engine):
    held = engine.client.get_metadata(["hrl-tasks", "held"], default={}) or {}
    return {address: {h: r for h, r in holders.items() if r} for address, holders in held.items()}


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_pbt_copies_a_top_trials_checkpoint_with_a_perturbed_config(engine, tmp_path):
    space = {"lr": choice([1e-5, 3e-3])}
    pbt = PBTScheduler(space, perturbation_interval=2, quantile_fraction=0.5, seed=0)
    result = hrl_tasks.tune("ppo", "CartPole-v1", space=space, config=TINY, num_samples=4,
                            scheduler=pbt, stop={"iteration": 8}, out=tmp_path, engine=engine,
                            seed=0, max_concurrent=4, trial_resources={})  # fmt: skip
    exploits = []
    for trial in result.trials:
        lines = (tmp_path / "trials" / trial["trial_id"] / "metrics.jsonl").read_text()
        exploits += [json.loads(x) for x in lines.splitlines() if "exploit" in x]
    assert exploits, "no trial exploited another in 8 iterations"
    for line in exploits:
        assert line["config"]["lr"] in (1e-5, 3e-3)
    assert all(t["status"] == "TERMINATED" for t in result.trials)


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_optunas_tpe_proposes_the_trials_and_learns_their_results(engine):
    pytest.importorskip("optuna", reason="optuna is in the test extra")
    result = hrl_tasks.tune("ppo", "CartPole-v1", space={"lr": loguniform(1e-4, 1e-2)},
                            config=TINY, num_samples=3, sampler="optuna",
                            stop={"iteration": 2}, engine=engine, seed=3)  # fmt: skip
    lrs = [t["config"]["lr"] for t in result.trials]
    assert len(set(lrs)) == 3 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert all(t["status"] == "TERMINATED" and t["best"] is not None for t in result.trials)


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_a_trial_that_could_never_fit_is_refused_at_once(engine):
    with pytest.raises(hrl_tasks.ResourceError, match="no arrangement"):
        hrl_tasks.tune("ppo", "CartPole-v1", config=TINY, trial_resources={"CPU": 2},
                       engine=engine)  # fmt: skip
    too_many = dict(TINY, num_workers=2, rollout_worker_resources={"CPU": 1})
    with pytest.raises(hrl_tasks.ResourceError, match="rollout_worker_resources"):
        hrl_tasks.tune("ppo", "CartPole-v1", config=too_many, engine=engine)


class StopAfterFirstEnd:
    """A reporter that interrupts the search once a trial has ended, as Ctrl-C would."""

    def __call__(self, search):
        if any(t.status == "TERMINATED" for t in search.trials.values()):
            raise KeyboardInterrupt


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_stopped_search_resumes_without_rerunning_its_finished_trials(engine, tmp_path):
    space = {"lr": loguniform(1e-4, 1e-2)}
    options = dict(
        space=space,
        config=TINY,
        num_samples=4,
        stop={"iteration": 4},
        engine=engine,
        trial_resources={"CPU": 1},
    )
    with pytest.raises(KeyboardInterrupt):
        hrl_tasks.tune(
            "ppo", "CartPole-v1", reporter=StopAfterFirstEnd(), out=tmp_path / "a", **options
        )
    written = {p.name for p in (tmp_path / "a").iterdir()}
    assert "search.json" in written and "search.pkl" not in written
    before = {t["trial_id"]: t for t in json.loads((tmp_path / "a" / "trials.json").read_text())}
    finished = {i for i, t in before.items() if t["status"] == "TERMINATED"}
    assert finished and len(finished) < 4
    out = tmp_path / "b"  # moved: its trials' checkpoints are found within it
    (tmp_path / "a").rename(out)
    result = hrl_tasks.tune("ppo", "CartPole-v1", resume=True, out=out, **options)
    assert len(result.trials) == 4 and {t["status"] for t in result.trials} == {"TERMINATED"}
    # The configs an uninterrupted search proposes (tune's seed is 0), those before and after.
    sampler = make_sampler("random", space, 4, seed=0)
    assert [t["config"] for t in result.trials] == [sampler.suggest(i) for i in range(4)]
    for trial in result.trials:
        if trial["trial_id"] in finished:
            assert trial["chunks"] == before[trial["trial_id"]]["chunks"]  # not run again
        assert trial["checkpoint"].startswith(str(out)) and os.path.exists(trial["checkpoint"])
        lines = (out / "trials" / trial["trial_id"] / "metrics.jsonl").read_text()
        iterations = [json.loads(x)["iteration"] for x in lines.splitlines()]
        assert iterations[-1] == 4 and max(iterations) == 4


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_search_survives_a_killed_worker_process():
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        pids = list(engine.client.run(os.getpid).values())
        killed = threading.Event()

        class KillOnce:
            def __call__(self, search):
                if not killed.is_set() and any(t.iterations >= 2 for t in search.trials.values()):
                    os.kill(pids[0], signal.SIGKILL)
                    killed.set()

        result = hrl_tasks.tune("ppo", "CartPole-v1", space={"lr": loguniform(1e-4, 1e-2)},
                                config=TINY, num_samples=3, stop={"iteration": 6},
                                engine=engine, checkpoint_interval_s=0.5,
                                reporter=KillOnce())  # fmt: skip
    assert killed.is_set()
    assert [t["status"] for t in result.trials] == ["TERMINATED"] * 3
    assert all(t["iterations"] == 6 for t in result.trials)


def search_in_a_task(n):
    engine = hrl_tasks.current_engine()
    config = dict(TINY, num_workers=2, rollout_worker_resources={"CPU": 1})
    result = hrl_tasks.tune("ppo", "CartPole-v1", space={"lr": loguniform(1e-4, 1e-2)},
                            config=config, num_samples=n, stop={"iteration": 3},
                            engine=engine, verbose=False)  # fmt: skip
    return result.trials


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_search_inside_a_task_holds_what_its_trials_hold_from_the_root_ledger():
    # Two processes with two threads each declare CPU=2 each. Each trial holds three
    # slots (its task and two rollout workers): four threads would run several trials
    # at once, the ledger only one. The search's own task lends its slot back while it
    # waits, so that a parent never starves its children.
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=2) as engine:
        trials = engine.submit(search_in_a_task, 3, resources={"CPU": 1}).result(timeout=280)
    assert [t["status"] for t in trials] == ["TERMINATED"] * 3
    assert most_at_once(trials) == 1


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_only_as_many_trials_run_at_once_as_the_ledger_has_room_for():
    # Four threads, but each trial holds two of the four CPU slots: two at once. Each
    # trial is one chunk of ten iterations (1-2 s), long enough that two admitted at
    # once overlap even when one worker is slow to start its first (three iterations,
    # 0.4 s, once ran one after the other under the whole suite's load).
    config = dict(TINY, rollout_worker_resources={"CPU": 1})
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=2) as engine:
        result = hrl_tasks.tune("ppo", "CartPole-v1", space={"lr": loguniform(1e-4, 1e-2)},
                                config=config, num_samples=4, stop={"iteration": 10},
                                engine=engine, verbose=False)  # fmt: skip
    assert [t["status"] for t in result.trials] == ["TERMINATED"] * 4
    assert most_at_once(result.trials) == 2, [t["chunks"] for t in result.trials]


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_asha_counts_env_steps_when_the_budget_is_env_steps(engine, tmp_path):
    # --stop-steps alone: rungs and the end are in env steps, not a default of 100 iterations.
    from hrl_tasks.tuning.runner import make_scheduler
    from hrl_tasks.tuning.state_file import read_decisions

    asha = make_scheduler("asha", {}, {"env_steps_sampled": 640}, "max", 0)
    assert asha.max_t == 640 and asha.rungs == (40, 160, 640)
    options = dict(space={"lr": grid([1e-6, 1e-5, 3e-3, 1e-2])}, config=TINY, scheduler="asha",
                   engine=engine, verbose=False, out=tmp_path)  # fmt: skip
    result = hrl_tasks.tune("ppo", "CartPole-v1", stop={"env_steps_sampled": 640}, **options)
    statuses = [t["status"] for t in result.trials]
    assert "STOPPED" in statuses and "TERMINATED" in statuses
    for trial in result.trials:
        if trial["status"] == "TERMINATED":
            assert trial["env_steps"] == 640 and trial["iterations"] == 10
        else:  # at the rung it lost at (counted in iterations, rung 40 would be iteration 40)
            assert any(r <= trial["env_steps"] < r + 64 for r in asha.rungs), trial
    # A resume without stop conditions keeps the saved ones, and their units.
    saved = read_decisions(tmp_path)
    assert saved["stop"] == {"env_steps_sampled": 640}
    assert saved["time_attr"] == "env_steps_sampled"
    again = hrl_tasks.tune("ppo", "CartPole-v1", resume=True, **options)
    assert [t["chunks"] for t in again.trials] == [t["chunks"] for t in result.trials]


def test_the_table_counts_trials_by_status_and_names_the_best():
    from hrl_tasks.tuning.report import TrialTable, render
    from hrl_tasks.tuning.runner import Trial

    trials = [Trial("0000", {"lr": 1e-3}, status="RUNNING", best=20.0, iterations=2,
                    last={"episode_return_mean": 20.0}),
              Trial("0001", {"lr": 1e-2}, status="STOPPED", best=35.5, iterations=4,
                    last={"episode_return_mean": 30.0}),
              Trial("0002", {"lr": 1e-4})]  # fmt: skip
    text = render(trials, "episode_return_mean", "max")
    head, header, *rows = text.splitlines()
    assert head == ("3 trials: 1 running, 1 pending, 1 stopped; best 0001: "
                    "episode_return_mean 35.5 (lr=0.01)")  # fmt: skip
    assert header.split() == ["trial", "status", "iter", "env", "steps", "episode_return_mean",
                              "lr"]  # fmt: skip
    assert rows[2].split() == ["0002", "pending", "0", "0", "-", "0.0001"]
    assert len(render(trials, "episode_return_mean", "min", max_rows=1).splitlines()) == 3

    class Shown:
        def __init__(self):
            self.trials, self.metric, self.mode, self.texts = {}, "m", "max", []

    search = Shown()
    table = TrialTable(every_s=3600, write=search.texts.append)
    search.trials = {t.trial_id: t for t in trials}
    table(search)
    table(search)  # nothing changed, too soon: not shown again
    trials[0].status = "TERMINATED"
    table(search)
    assert len(search.texts) == 2


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_search_from_the_command_line_ends_without_errors_on_stderr(tmp_path):
    # Nested engines in the worker processes unsubscribe before their clients close:
    # the scheduler logged each closed subscriber as CRITICAL with a traceback.
    import subprocess
    import sys

    argv = [sys.executable, "-m", "hrl_tasks.cli", "tune", "ppo", "--env", "CartPole-v1",
            "--space", "lr=loguniform(1e-4,1e-2)", "--samples", "2", "--stop-iters", "2",
            "--set", "num_workers=1", "--set", "train_batch_size=64", "--out", str(tmp_path)]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "done: best trial" in run.stdout
    assert "Traceback" not in run.stderr and "CRITICAL" not in run.stderr, run.stderr[-3000:]


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_an_interrupted_search_from_the_command_line_resumes_without_rerunning_trials(tmp_path):
    import subprocess
    import sys
    import time

    argv = [sys.executable, "-m", "hrl_tasks.cli", "tune", "ppo", "--env", "CartPole-v1",
            "--space", "lr=choice(0.001,0.002,0.003)", "--samples", "3", "--stop-iters", "40",
            "--max-concurrent", "1", "--set", "num_workers=1", "--set", "train_batch_size=64",
            "--out", str(tmp_path)]  # fmt: skip
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path)  # fmt: skip
    trials_json = tmp_path / "trials.json"
    deadline = time.monotonic() + 150
    finished = set()
    # Each trial's 40 iterations take well over the poll and the Ctrl-C's way (at 4,
    # all three trials had sometimes ended before the Ctrl-C reached the search).
    while not finished and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
        try:
            finished = {t["trial_id"] for t in json.loads(trials_json.read_text())
                        if t["status"] == "TERMINATED"}  # fmt: skip
        except (OSError, ValueError):  # not written yet, or written as it is read
            continue
    run.send_signal(signal.SIGINT)  # Ctrl-C
    run.communicate(timeout=60)
    before = {t["trial_id"]: t for t in json.loads(trials_json.read_text())}
    finished = {i for i, t in before.items() if t["status"] == "TERMINATED"}
    assert finished and len(finished) < 3
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True,
                             timeout=180, cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = {t["trial_id"]: t for t in json.loads(trials_json.read_text())}
    assert len(after) == 3 and {t["status"] for t in after.values()} == {"TERMINATED"}
    for trial_id in finished:
        assert after[trial_id]["chunks"] == before[trial_id]["chunks"]  # not run again
