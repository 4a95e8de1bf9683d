"""The hrl-tasks command: help, bad input, a short run and its resumption."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hrl_tasks.cli import build_parser, main, parse_value
from hrl_tasks.errors import ConfigError
from hrl_tasks.registry import ALGORITHM_PATHS, get_algorithm, get_config_class

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_algorithms_and_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for word in ("a2c", "a3c", "ppo", "--stop-reward", "--resume", "--address", "--set"):
        assert word in text


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "ppo", "--env", "CartPol-v1"], "did you mean 'CartPole-v1'"),
        (["train", "ppo", "--set", "lrr=3"], "did you mean 'lr'"),
        (["train", "ppo", "--set", "lr=fast"], "lr must be float"),
        (["train", "ppo", "--set", "lr"], "KEY=VALUE"),
        (["train", "ppo", "--resume", "/nonexistent/run"], "no checkpoint"),
        (["tune", "ppo", "--space", "lr=bogus(1)"], "unknown helper 'bogus'"),
        (["tune", "ppo", "--space", "lrr=uniform(0, 1)"], "did you mean 'lr'"),
        (["tune", "ppo", "--set", "lr=-1"], "lr must be > 0"),
        (["tune", "ppo", "--trial-resources", "CPU"], "KEY=VALUE"),
        (["tune", "ppo", "--trial-resources", "CPU=x"], "is not a number"),
        (["train", "ppo", "--cluster-opt", "cores=1"], "go with --cluster"),
        (["train", "ppo", "--adapt", "1:4"], "go with --gateway"),
        (["tune", "ppo", "--gateway-opt", "worker_cores=2"], "go with --gateway"),
        (["train", "ppo", "--gateway", "--adapt", "4:1"], "--adapt 4:1: needs 0 <= MIN <= MAX"),
        (["train", "ppo", "--ports", "40000:40100"], "--ports, --interface and --no-tls go with"),
        (["train", "ppo", "--no-tls"], "--ports, --interface and --no-tls go with --runner"),
        (["train", "ppo", "--runner", "mpi", "--ports", "low:high"], "--ports takes LOW:HIGH"),
        (["train", "ppo", "--runner", "slurm"], "runs under its launcher (srun hrl-tasks"),
        (["tune", "ppo", "--runner", "mpi"], "runs under its launcher (mpirun -n 4"),
        (["tune", "ppo", "--resume", "--out", "/nonexistent/search"], "nothing to resume"),
    ],
)
def test_bad_input_exits_with_one_line(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "ppo", "--checkpoint-every", "0"], "--checkpoint-every: must be at least 1"),
        (["train", "ppo", "--keep-checkpoints", "-1"], "--keep-checkpoints: must be at least 0"),
        (["train", "ppo", "--keep-checkpoints", "all"], "expected a whole number, got 'all'"),
        (["train", "ppo", "--address", "tcp://h:8786", "--cluster", "slurm"], "not allowed with"),
        (["train", "ppo", "--gateway", "--runner", "slurm"], "not allowed with"),
        (["tune", "ppo", "--address", "tcp://h:8786", "--gateway", "http://g"], "not allowed with"),
        (["tune", "ppo", "--jobs", "0"], "--jobs: must be at least 1"),
    ],
)
def test_bad_counts_are_usage_errors(capsys, argv, says):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


LIGHT_CHECK = """
import sys
from hrl_tasks.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted({"torch", "distributed", "gymnasium", "matplotlib"} & set(sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["train", "--help"], ["train", "ppx"], ["keys"], ["tune", "--help"],
     ["tune", "ppx"]],
)  # fmt: skip
def test_help_and_usage_errors_import_nothing_heavy(argv):
    found = subprocess.run(
        [sys.executable, "-c", LIGHT_CHECK, *argv], capture_output=True, text=True, timeout=60
    )
    assert found.stdout.strip().splitlines()[-1] == "[]", found.stderr


def test_the_engine_names_load_on_first_use():
    code = (
        "import sys, hrl_tasks; light = 'distributed' not in sys.modules; "
        "from hrl_tasks import Engine, current_engine; "
        "print(light, Engine.__name__, 'Engine' in dir(hrl_tasks), callable(current_engine))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert found.stdout.split() == ["True", "Engine", "True", "True"], found.stderr
    with pytest.raises(AttributeError, match="no attribute 'Engin'"):
        import hrl_tasks

        hrl_tasks.Engin  # noqa: B018


def test_keys_lists_defaults(capsys):
    assert main(["keys", "a3c"]) == 0
    out = capsys.readouterr().out
    assert "num_async = 1" in out and "lr = " in out


def test_parse_value():
    assert parse_value("3e-4") == 3e-4 and parse_value("[64, 64]") == [64, 64]
    assert parse_value("true") is True and parse_value("none") is None
    assert parse_value("CartPole-v1") == "CartPole-v1"


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_train_writes_metrics_curve_checkpoints_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    tiny = ["--num-workers", "1", "--set", "train_batch_size=64", "--set", "num_envs_per_worker=2",
            "--set", "rollout_fragment_length=16", "--no-progress"]  # fmt: skip
    argv = ["train", "ppo", "--env", "CartPole-v1", "--stop-iters", "2", "--out", str(out),
            "--checkpoint-every", "1", "--keep-checkpoints", "1", *tiny]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "dashboard: http" in printed and "done: iteration 2" in printed
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert [p.name for p in (out / "checkpoints").glob("*.hrl")] == ["checkpoint-000002.hrl"]
    returns = tensorboard_scalars(out / "tensorboard", "episode_return_mean")
    assert [step for step, _ in returns] == [json.loads(x)["env_steps_sampled"] for x in lines]
    assert main(["train", "ppo", "--resume", str(out), "--stop-iters", "3", "--no-progress"]) == 0
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    assert json.loads(lines[2])["env_steps_sampled"] > json.loads(lines[1])["env_steps_sampled"]


def files_of(path: Path) -> dict:
    """Every file under ``path``, relative name -> bytes."""
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


TINY_PPO = [
    "--env",
    "CartPole-v1",
    "--num-workers",
    "1",
    "--set",
    "train_batch_size=64",
    "--set",
    "num_envs_per_worker=2",
    "--set",
    "rollout_fragment_length=16",
    "--no-progress",
]


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_second_run_into_a_used_out_leaves_the_first_byte_for_byte(tmp_path, capsys):
    run_a = tmp_path / "runA"
    argv = ["train", "ppo", "--stop-iters", "4", "--out", str(run_a), "--checkpoint-every", "2"]
    assert main([*argv, *TINY_PPO]) == 0
    first = files_of(run_a)
    assert {"checkpoints/checkpoint-000002.hrl", "checkpoints/checkpoint-000004.hrl"} <= set(first)
    capsys.readouterr()
    a2c = [
        "train",
        "a2c",
        "--env",
        "CartPole-v1",
        "--stop-iters",
        "1",
        "--out",
        str(run_a),
        "--num-workers",
        "1",
        "--set",
        "train_batch_size=32",
        "--no-progress",
    ]
    assert main(a2c) == 2
    err = capsys.readouterr().err
    assert f"{run_a} holds another run's files" in err and "--resume" in err and "--force" in err
    assert files_of(run_a) == first
    # The checkpoint of iteration 2 made to look newest, as a copy without times may do:
    # the run still resumes from iteration 4.
    (run_a / "checkpoints" / "checkpoint-000002.hrl").touch()
    assert main(["train", "ppo", "--resume", str(run_a), "--stop-iters", "5", "--no-progress"]) == 0
    lines = (run_a / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3, 4, 5]
    resumed = files_of(run_a)
    capsys.readouterr()
    assert main([*a2c, "--force"]) == 0
    (aside,) = tmp_path.glob("runA.old-*")
    assert f"moved the earlier run's files in {run_a} to {aside}" in capsys.readouterr().out
    assert files_of(aside) == resumed
    assert [
        json.loads(x)["iteration"] for x in (run_a / "metrics.jsonl").read_text().splitlines()
    ] == [1]


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_the_same_command_twice_gives_two_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for run in ("ppo-CartPole-v1", "ppo-CartPole-v1-2"):
        assert main(["train", "ppo", "--stop-iters", "1", *TINY_PPO]) == 0
        assert f"writing to {Path('runs') / run}/" in capsys.readouterr().out
        assert (tmp_path / "runs" / run / "checkpoints" / "checkpoint-000001.hrl").exists()
    first = tmp_path / "runs" / "ppo-CartPole-v1"
    assert len((first / "metrics.jsonl").read_text().splitlines()) == 1


EXPERIMENT = """
from hrl_tasks.policies.policy_map import PolicySpec

def first_ppo_second_dqn(agent_id, episode):
    return "ppo" if agent_id == "player_1" else "dqn"

experiment = {
    "algorithm": "composition",
    "env": "tictactoe_v3",
    "policies": {"ppo": PolicySpec("ppo", {"train_batch_size": 64, "minibatch_size": 32}),
                 "dqn": PolicySpec("dqn", {"learning_starts": 16, "train_batch_size": 16,
                                           "train_steps_per_round": 2, "hidden": (32, 32)})},
    "policy_mapping_fn": first_ppo_second_dqn,
    "config": {"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 16,
               "min_steps_per_report": 64},
    "stop": {"iteration": 2},
}
"""


@pytest.mark.cluster
def test_train_runs_a_multi_agent_experiment_from_a_python_file(tmp_path, capsys):
    experiment = tmp_path / "experiment.py"
    experiment.write_text(EXPERIMENT)
    out = tmp_path / "run"
    assert main(["train", "--config", str(experiment), "--out", str(out), "--no-progress"]) == 0
    assert "done: iteration 2" in capsys.readouterr().out  # the file's stop condition
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"policy_return_mean/ppo", "policy_return_mean/dqn"} <= set(last)
    assert "ppo/total" in last["info"] and "dqn/loss_td" in last["info"]
    assert (out / "learning_curve.png").stat().st_size > 1000
    argv = ["train", "ppo", "--env", "tictactoe_v3", "--stop-iters", "1", "--out",
            str(tmp_path / "shared"), "--no-progress", "--num-workers", "1", "--set",
            "train_batch_size=64"]  # fmt: skip
    assert main(argv) == 0  # one policy shared by both players, no file needed


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "multiagent").glob("*.py")),
                         ids=lambda p: p.name)  # fmt: skip
def test_the_example_experiment_files_hold_valid_configs(path):
    from hrl_tasks.algorithms import get_algorithm
    from hrl_tasks.cli import experiment_config, read_experiment

    experiment = read_experiment(path)
    config = experiment_config(experiment)
    get_algorithm(experiment["algorithm"]).config_class.from_dict(config)
    assert experiment["stop"] and callable(config["policy_mapping_fn"])


@pytest.mark.parametrize(
    "text, says",
    [
        ("x = 1", "must define `experiment`"),
        ("experiment = {'algorithm': 'ppo', 'stopp': {}}", "unknown keys ['stopp']"),
        ("experiment = {'env': 'tictactoe_v3'}", "name the algorithm"),
        ("import no_such_module", "failed: ModuleNotFoundError: No module named"),
        ("experiment = {'algorithm': 'ppo', 'stop': 5}", "experiment['stop'] must be a dict"),
    ],
)
def test_bad_experiment_files_exit_with_one_line(tmp_path, capsys, text, says):
    experiment = tmp_path / "experiment.py"
    experiment.write_text(text)
    assert main(["train", "--config", str(experiment)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert main(["train", "--config", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_tune_shows_a_table_and_writes_results_a_curve_and_checkpoints(tmp_path, capsys):
    out = tmp_path / "search"
    argv = ["tune", "ppo", "--env", "CartPole-v1", "--space", "lr=loguniform(1e-4,1e-2)",
            "--space", "clip=choice(0.1,0.3)", "--samples", "2", "--scheduler", "asha",
            "--stop-iters", "2", "--num-workers", "1", "--set", "train_batch_size=64",
            "--set", "num_envs_per_worker=2", "--set", "rollout_fragment_length=16",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 trials:" in printed and "episode_return_mean" in printed
    assert "done: best trial" in printed
    trials = json.loads((out / "trials.json").read_text())
    assert [t["status"] for t in trials] == ["TERMINATED", "TERMINATED"]
    assert all(t["config"]["clip"] in (0.1, 0.3) for t in trials)
    assert len((out / "results.csv").read_text().splitlines()) == 3
    assert (out / "curves.png").exists() and list(out.glob("trials/*/checkpoints/*.hrl"))
    for trial in trials:  # a TensorBoard run per trial
        assert len(tensorboard_scalars(out / "tensorboard" / trial["trial_id"], "iteration")) == 2


def tensorboard_scalars(logdir, tag):
    """``(step, value)`` of ``tag`` in the TensorBoard run in ``logdir``."""
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard is in the test extra",
    )
    events = accumulator.EventAccumulator(str(logdir))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


TINY_SETTINGS = {
    "a2c": ["train_batch_size=32"],
    "a3c": ["min_steps_per_report=32"],
    "dqn": ["learning_starts=32", "train_steps_per_round=2", "min_steps_per_report=32"],
    "apex": ["learning_starts=32", "min_steps_per_report=32", "train_batch_size=16"],
    "impala": ["train_batch_size=32", "min_steps_per_report=32"],
    "es": ["num_perturbations=2", "max_episode_steps=50"],
    "sac": [
        "learning_starts=32",
        "min_steps_per_report=32",
        "train_batch_size=16",
        "training_intensity=4",
    ],  # discrete actions on CartPole
}


@pytest.mark.cluster
@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", sorted(TINY_SETTINGS))
def test_every_algorithm_trains_from_the_command_line(tmp_path, capsys, algorithm):
    sets = [item for kv in TINY_SETTINGS[algorithm] for item in ("--set", kv)]
    argv = ["train", algorithm, "--env", "CartPole-v1", "--stop-iters", "1", "--num-workers", "1",
            "--out", str(tmp_path), "--no-progress", "--set", "rollout_fragment_length=16", *sets]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert "done: iteration 1" in capsys.readouterr().out


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_alphazero_trains_on_a_game_and_stops_on_any_metric(tmp_path, capsys):
    out = tmp_path / "az"
    tiny = ["--num-workers", "1", "--no-progress", "--out", str(out),
            *[x for kv in ("games_per_iteration=2", "simulations=16", "evaluation_interval=1",
                           "evaluation_games=2", "updates_per_iteration=2", "min_buffer_size=8")
              for x in ("--set", kv)]]  # fmt: skip
    argv = ["train", "alphazero", "--env", "tictactoe_v3", "--stop", "win_rate/random=0", *tiny]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "done: iteration 1" in printed and "win_rate/random" in printed
    (line,) = (out / "metrics.jsonl").read_text().splitlines()
    assert {"win_rate/random", "win_rate/minimax", "simulations_per_s"} <= set(json.loads(line))
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert main(["train", "alphazero", "--resume", str(out), "--stop-iters", "2", *tiny]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "alphazero", "--stop", "win_rate/random"], "METRIC=NUMBER"),
        (["train", "alphazero", "--set", "opponents=['best']"], "unknown opponent 'best'"),
        (["train", "alphazero", "--env", "tictactoe_v2"], "did you mean 'tictactoe_v3'"),
        (
            ["train", "alphazero", "--env", "connect_four_v3", "--set", "opponents=['minimax']"],
            "opponent 'minimax' solves the whole game tree",
        ),
    ],
)
def test_alphazero_bad_input_exits_with_one_line(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_stop_time_ends_a_run_whose_iteration_cannot_end_in_time(tmp_path, capsys):
    """An iteration far longer than --stop-time: its waits end 5 s past the limit, the
    run saves nothing of the cut iteration, and exits 0."""
    out = tmp_path / "az"
    argv = ["train", "alphazero", "--env", "connect_four_v3", "--num-workers", "1",
            "--set", "simulations=2000", "--stop-time", "1", "--no-progress", "--out", str(out)]  # fmt: skip
    started = time.monotonic()
    assert main(argv) == 0, capsys.readouterr().err
    assert time.monotonic() - started < 60
    printed = capsys.readouterr().out
    assert "--stop-time reached while iteration 1 waited on the cluster" in printed
    assert "No checkpoint was saved." in printed
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_ctrl_c_ends_a_run_within_ten_seconds_whatever_it_waits_on(tmp_path):
    """Ctrl-C while the driver waits on an iteration far longer than the test: the
    command closes the algorithm and the cluster and exits 130 within 10 s."""
    argv = [sys.executable, "-m", "hrl_tasks.cli", "train", "alphazero", "--env",
            "connect_four_v3", "--num-workers", "1", "--set", "simulations=2000",
            "--no-progress", "--out", str(tmp_path / "az")]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # the cluster is up and the first iteration under way
        if line.startswith("writing to"):
            break
    time.sleep(1.5)
    process.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    try:
        code = process.wait(timeout=30)
    finally:
        process.kill()
    assert time.monotonic() - interrupted < 10
    assert code == 130 and "interrupted" in process.stderr.read()


def test_stop_conditions_read_at_least_and_at_most():
    from hrl_tasks.algorithms import stop_reached
    from hrl_tasks.cli import parse_stop

    assert parse_stop("win_rate/random=0.95") == {"win_rate/random": 0.95}
    assert parse_stop("win_rate/random>=0.95") == {"win_rate/random": 0.95}
    assert parse_stop("loss_rate/minimax<=0") == {"loss_rate/minimax": ("<=", 0.0)}
    stop = {**parse_stop("loss_rate/minimax<=0"), "iteration": 50}
    assert not stop_reached({"iteration": 3}, stop)  # no evaluation yet
    assert not stop_reached({"iteration": 3, "loss_rate/minimax": 0.1}, stop)
    assert stop_reached({"iteration": 3, "loss_rate/minimax": 0.0}, stop)
    with pytest.raises(ValueError, match="METRIC<=NUMBER"):
        parse_stop("loss_rate/minimax<=none")


def test_an_env_id_from_a_checkpoint_or_a_recording_imports_no_local_module_unasked(
    tmp_path, capsys, monkeypatch
):
    import numpy as np

    import hrl_tasks
    from hrl_tasks.algorithms.checkpoint import read_checkpoint, write_checkpoint
    from hrl_tasks.cli import plan_train
    from hrl_tasks.data.experience import PartWriter

    (tmp_path / "evilmod.py").write_text("open('imported', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    evil = "evilmod:EvilCartPole-v0"
    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-000001.hrl"
    with hrl_tasks.SyncEngine() as engine:
        algo, _ = hrl_tasks.train(
            "ppo",
            "CartPole-v1",
            stop={"iteration": 1},
            engine=engine,
            num_workers=1,
            train_batch_size=64,
        )
        state = algo.get_state()
        algo.stop()
    state["config"]["env"] = evil
    write_checkpoint(checkpoint, state)
    assert read_checkpoint(checkpoint)["config"]["env"] == evil
    writer = PartWriter(str(tmp_path / "recording"), "demo", {"env": evil})
    writer.add(
        {
            "obs": np.zeros((3, 4), np.float32),
            "actions": np.array([0, 1, 0]),
            "rewards": np.ones(3, np.float32),
            "terminateds": np.array([False, False, True]),
            "truncateds": np.zeros(3, bool),
            "eps_id": np.zeros(3, np.int64),
            "t": np.arange(3),
        }
    )
    writer.flush()
    resume = ["train", "ppo", "--resume", str(tmp_path / "run"), "--stop-iters", "2"]
    train_from = ["train", "bc", "--train-from", str(tmp_path / "recording"), "--stop-iters", "1"]
    for argv, source in ((resume, str(checkpoint)), (train_from, str(tmp_path / "recording"))):
        assert main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"{source}: its env {evil!r} would import the module 'evilmod'" in err
        assert "--trust-env-modules" in err and err.count("\n") == 1
        trusted = plan_train(build_parser().parse_args([*argv, "--trust-env-modules"]))
        assert trusted.config["env"] == evil
    assert not (tmp_path / "imported").exists()


def test_tune_into_a_used_out_is_refused_before_any_cluster(tmp_path, capsys):
    out = tmp_path / "search"
    out.mkdir()
    (out / "trials.json").write_text("[]\n")
    (out / "search.json").write_text("{}\n")
    assert main(["tune", "ppo", "--env", "CartPole-v1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds another run's files (search.json, trials.json)" in err
    assert "--resume" in err and "--force" in err
    assert sorted(p.name for p in out.iterdir()) == ["search.json", "trials.json"]
    assert (out / "trials.json").read_text() == "[]\n"


CONFIG_CHECK = """
import sys
from hrl_tasks.cli import build_parser, plan_train
setup = plan_train(build_parser().parse_args(sys.argv[1:]))
print(type(setup.checked).__name__, "torch" in sys.modules)
"""


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "a3c", "impala", "appo", "dqn", "alphazero"])
def test_trains_config_is_checked_without_torch(algorithm):
    """The embedded cluster starts while the algorithm's plan (and torch) imports, after
    the config was checked: that check needs no torch."""
    found = subprocess.run(
        [sys.executable, "-c", CONFIG_CHECK, "train", algorithm, "--set", "seed=1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.stdout.split()[-1] == "False", found.stderr


def test_a_bad_env_is_refused_and_the_cluster_started_beside_the_import_is_closed(tmp_path, capsys):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert main(["train", "ppo", "--env", "NoSuchEnv-v0", "--out", str(tmp_path / "run")]) == 2
    assert "unknown env 'NoSuchEnv-v0'" in capsys.readouterr().err
    # What may stay: multiprocessing's servers (the forkserver the workers fork from),
    # with no worker left under them.
    for process in psutil.Process().children(recursive=True):
        if process.pid not in before and process.is_running():
            assert "from multiprocessing." in " ".join(process.cmdline())
            assert [p for p in process.children() if p.status() != psutil.STATUS_ZOMBIE] == []


def test_the_registry_names_each_algorithms_own_config_class():
    for name in ALGORITHM_PATHS:
        assert get_config_class(name) is get_algorithm(name).config_class, name
    with pytest.raises(ConfigError, match="unknown algorithm 'ppx'; available: a2c"):
        get_config_class("ppx")
