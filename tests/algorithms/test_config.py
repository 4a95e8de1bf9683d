import dataclasses
import math
import os
import subprocess
import sys
import time
import typing

import psutil
import pytest

from hrl_tasks.algorithms import (
    ALGORITHMS,
    A3CConfig,
    ApeXConfig,
    ConfigError,
    DQNConfig,
    PPOConfig,
    get_algorithm,
    stop_reached,
)
from hrl_tasks.algorithms.config import Bound, bounds_of, check_bounds
from hrl_tasks.cli import main
from hrl_tasks.policies import PPOPolicyConfig
from hrl_tasks.registry import get_config_class


def test_unknown_key_names_the_key_the_nearest_and_the_allowed():
    with pytest.raises(ConfigError) as info:
        PPOConfig.from_dict({"learning_rate": 0.1})
    message = str(info.value)
    assert (
        "'learning_rate'" in message
        and "Allowed keys:" in message
        and "train_batch_size" in message
    )


def test_typo_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'num_workers'"):
        PPOConfig.from_dict(num_worker=2)


def test_wrong_types_are_named():
    with pytest.raises(ConfigError, match=r"PPOConfig.num_workers must be int, got '2'"):
        PPOConfig.from_dict(num_workers="2")
    with pytest.raises(ConfigError, match="lr must be float"):
        PPOConfig.from_dict(lr="fast")
    with pytest.raises(ConfigError, match="normalize_advantages"):
        PPOConfig.from_dict(normalize_advantages=1)


def test_coercions_that_lose_nothing():
    config = PPOConfig.from_dict(lr=1, hidden=[32, 32], seed=None, target_kl=0.02)
    assert config.lr == 1.0 and isinstance(config.lr, float)
    assert config.hidden == (32, 32) and config.seed is None
    assert A3CConfig.from_dict(num_async=2).num_async == 2


def test_unknown_algorithm():
    with pytest.raises(ConfigError, match="available: a2c, a3c, .*ppo"):
        get_algorithm("ppo2")


def test_stop_conditions():
    assert stop_reached({"episode_return_mean": 451.0}, {"episode_return_mean": 450})
    assert not stop_reached({"episode_return_mean": float("nan")}, {"episode_return_mean": 450})
    assert stop_reached({"iteration": 3, "env_steps_sampled": 10}, {"iteration": 3})


# --- ranges -------------------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, values, message",
    [
        ("ppo", {"lr": -0.001}, "PPOConfig.lr must be > 0, got -0.001"),
        ("ppo", {"gamma": 1.5}, "PPOConfig.gamma must be in [0, 1], got 1.5"),
        ("ppo", {"lam": -0.1}, "PPOConfig.lam must be in [0, 1], got -0.1"),
        ("ppo", {"clip": 0}, "PPOConfig.clip must be > 0, got 0.0"),
        ("ppo", {"minibatch_size": 0}, "PPOConfig.minibatch_size must be >= 1, got 0"),
        ("ppo", {"num_sgd_iter": 0}, "PPOConfig.num_sgd_iter must be >= 1, got 0"),
        ("ppo", {"hidden": [64, 0]}, "PPOConfig.hidden must hold only values >= 1, got (64, 0)"),
        ("ppo", {"lr": math.nan}, "PPOConfig.lr must be finite, got nan"),
        ("ppo", {"gamma": math.inf}, "PPOConfig.gamma must be finite, got inf"),
        ("ppo", {"grad_clip": -math.inf}, "PPOConfig.grad_clip must be finite, got -inf"),
        ("ppo", {"seed": -1}, "PPOConfig.seed must be in [0, 2**63), got -1"),
        ("ppo", {"seed": 2**63}, f"PPOConfig.seed must be in [0, 2**63), got {2**63}"),
        ("a2c", {"num_workers": -1}, "A2CConfig.num_workers must be >= 0, got -1"),
        ("a2c", {"train_batch_size": 0}, "A2CConfig.train_batch_size must be >= 1, got 0"),
        ("a3c", {"num_workers": 0}, "A3CConfig.num_workers must be >= 1, got 0"),
        ("a3c", {"num_async": 0}, "A3CConfig.num_async must be >= 1, got 0"),
        ("dqn", {"epsilon_end": 1.2}, "DQNConfig.epsilon_end must be in [0, 1], got 1.2"),
        ("dqn", {"tau": 0.0}, "DQNConfig.tau must be in (0, 1], got 0.0"),
        ("dqn", {"train_steps_per_round": 0}, "DQNConfig.train_steps_per_round must be >= 1"),
        ("dqn", {"max_restarts": -1}, "DQNConfig.max_restarts must be >= 0, got -1"),
        ("impala", {"num_workers": 0}, "IMPALAConfig.num_workers must be >= 1, got 0"),
        ("impala", {"clip_rho_threshold": 0}, "IMPALAConfig.clip_rho_threshold must be > 0"),
        ("appo", {"num_workers": 0}, "APPOConfig.num_workers must be >= 1, got 0"),
        ("appo", {"clip": 0}, "APPOConfig.clip must be > 0, got 0.0"),
        ("appo", {"num_sgd_iter": 0}, "APPOConfig.num_sgd_iter must be >= 1, got 0"),
        ("es", {"noise_stdev": 0}, "ESConfig.noise_stdev must be > 0, got 0.0"),
        ("es", {"max_episode_steps": 0}, "ESConfig.max_episode_steps must be >= 1, got 0"),
        ("apex", {"weight_sync_every": 0}, "ApeXConfig.weight_sync_every must be >= 1, got 0"),
    ],
)
def test_out_of_range_values_are_named(algorithm, values, message):
    with pytest.raises(ConfigError) as info:
        get_algorithm(algorithm).config_class.from_dict(values)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "algorithm, values",
    [
        ("ppo", {"gamma": 0, "lam": 1, "ent_coef": 0, "vf_clip": None, "seed": 2**63 - 1}),
        ("ppo", {"num_workers": 0, "minibatch_size": 4096, "hidden": ()}),
        ("dqn", {"epsilon_start": 0, "epsilon_end": 1, "tau": 1, "learning_starts": 0}),
        ("dqn", {"buffer_size": 64, "learning_starts": 64, "train_batch_size": 64}),
        ("es", {"theta_eval_episodes": 0, "max_episode_steps": None, "l2_coeff": 0}),
        ("impala", {"min_steps_per_report": 0, "clip_c_threshold": None}),
        ("appo", {"num_sgd_iter": 1, "clip_pg_rho_threshold": None}),
        ("apex", {"buffer_size": 2, "learning_starts": 2, "train_batch_size": 512}),
    ],
)
def test_values_on_the_bounds_are_accepted(algorithm, values):
    config = get_algorithm(algorithm).config_class.from_dict(values)
    assert all(getattr(config, key) == value for key, value in values.items())


def test_keys_that_do_not_fit_together():
    with pytest.raises(ConfigError, match=r"DQNConfig.learning_starts must be <= buffer_size"):
        DQNConfig.from_dict(buffer_size=500)  # the default learning_starts is 1000
    with pytest.raises(ConfigError, match=r"DQNConfig.train_batch_size must be <= buffer_size"):
        DQNConfig.from_dict(buffer_size=32, learning_starts=0)
    with pytest.raises(ConfigError, match=r"ApeXConfig.num_replay_shards must be <= buffer_size"):
        ApeXConfig.from_dict(buffer_size=1, learning_starts=0, num_replay_shards=2)


def test_direct_construction_is_checked_too():
    with pytest.raises(ConfigError, match="PPOConfig.lr must be > 0"):
        PPOConfig(lr=-1.0)
    with pytest.raises(ConfigError, match="PPOPolicyConfig.lr must be > 0"):
        check_bounds(PPOPolicyConfig(lr=-1.0))  # a policy config, as users build them
    check_bounds(PPOPolicyConfig())


def test_every_numeric_key_has_a_bound_and_every_bound_a_key():
    for algorithm in ALGORITHMS.values():
        cls = algorithm.config_class
        hints = typing.get_type_hints(cls)
        numeric = {f.name for f in dataclasses.fields(cls) if _is_numeric(hints[f.name])}
        assert numeric <= set(bounds_of(cls)), (cls.__name__, numeric - set(bounds_of(cls)))
        for klass in cls.__mro__[:-1]:  # not object
            declared = set(vars(klass).get("BOUNDS", {}))
            assert declared <= {f.name for f in dataclasses.fields(klass)}, klass.__name__


def test_every_bound_rejects_the_numbers_just_outside_it():
    for algorithm in ALGORITHMS.values():
        cls = algorithm.config_class
        hints = typing.get_type_hints(cls)
        for key, bound in bounds_of(cls).items():
            outside = []
            if bound.low != -math.inf:
                outside.append(bound.low - 1 if bound.low_closed else bound.low)
            if bound.high != math.inf:
                outside.append(bound.high + 1 if bound.high_closed else bound.high)
            for value in outside:
                value = [value] if typing.get_origin(hints[key]) is tuple else value
                with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.{key} must"):
                    cls.from_dict({key: value})


def test_every_float_key_rejects_nan_and_infinity():
    for algorithm in ALGORITHMS.values():
        cls = algorithm.config_class
        hints = typing.get_type_hints(cls)
        for key in (f.name for f in dataclasses.fields(cls)):
            if float not in (hints[key], *typing.get_args(hints[key])):
                continue
            for value in (math.nan, math.inf, -math.inf):
                with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.{key} must be finite"):
                    cls.from_dict({key: value})


def _is_numeric(hint) -> bool:
    if hint in (int, float):
        return True
    return any(_is_numeric(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def test_bounds_read_as_written():
    half_open = Bound.parse("(0, 1]")
    assert 1 in half_open and 0.5 in half_open and 0 not in half_open
    assert math.nan not in Bound.parse(">= 0") and math.nan not in half_open
    assert 2**63 - 1 in Bound.parse("[0, 2**63)") and 2**63 not in Bound.parse("[0, 2**63)")
    assert 5 in Bound.parse("<= 5") and 5 not in Bound.parse("< 5")
    assert str(Bound.parse(">= 1")) == ">= 1" and str(half_open) == "in (0, 1]"
    with pytest.raises(ValueError, match="not a bound"):
        Bound.parse("positive")


def test_a_huge_int_for_a_float_is_a_config_error():
    with pytest.raises(ConfigError, match="PPOConfig.lr must be float"):
        PPOConfig.from_dict(lr=10**400)


# --- before any cluster starts ------------------------------------------------


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_algorithm_raises_before_starting_a_cluster(name):
    children = _child_pids()
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"Config.max_restarts must be >= 0, got -1"):
        get_algorithm(name)({"max_restarts": -1})
    assert time.perf_counter() - start < 1.0
    assert _child_pids() == children


def test_cli_rejects_an_out_of_range_value_in_one_line_without_a_cluster(capsys):
    children = _child_pids()
    start = time.perf_counter()
    assert main(["train", "ppo", "--set", "lr=-1"]) == 2
    assert time.perf_counter() - start < 2.0
    assert _child_pids() == children
    err = capsys.readouterr().err
    assert err == "hrl-tasks: error: PPOConfig.lr must be > 0, got -1.0\n"


def test_cli_keys_show_the_bounds(capsys):
    assert main(["keys", "ppo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "lr = 0.001  (> 0)" in out and "gamma = 0.99  (in [0, 1])" in out
    assert "env = 'CartPole-v1'" in out


def _child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_an_int_that_a_float_cannot_hold_exactly_is_refused():
    with pytest.raises(ConfigError, match="PPOConfig.lr must be float"):
        PPOConfig.from_dict(lr=2**63 - 1)


@pytest.mark.parametrize("name, values, says", [
    ("dqn", {"training_intensity": 64.0}, "DQNConfig.training_intensity must be None, or "
     "DQNConfig.train_steps_per_round must be: both are set (training_intensity=64, "
     "train_steps_per_round=128)"),
    ("sac", {"train_steps_per_round": 5}, "SACConfig.training_intensity must be None, or "
     "SACConfig.train_steps_per_round must be: both are set"),
    ("td3", {"training_intensity": None}, "TD3Config.training_intensity must be set (replayed rows per env "
     "step), or TD3Config.train_steps_per_round must be: both are None"),
    ("sac", {"learning_starts": 2_000_000}, "SACConfig.learning_starts must be <= buffer_size"),
])  # fmt: skip
def test_the_replay_ratio_is_set_by_one_key(name, values, says):
    cls = ALGORITHMS[name].config_class
    with pytest.raises(ConfigError) as raised:
        cls.from_dict(values)
    assert says in str(raised.value) and "\n" not in str(raised.value)
    # Either alone is fine.
    assert cls.from_dict(training_intensity=64.0, train_steps_per_round=None).training_intensity
    assert cls.from_dict(train_steps_per_round=5, training_intensity=None).train_steps_per_round


def test_learner_threads_none_is_a_thread_per_core_even_after_a_run_that_set_one():
    import torch

    from hrl_tasks.policies.torch_utils import default_threads

    before = torch.get_num_threads()
    try:
        get_algorithm("cql").parse_config({"learner_threads": 1}, {})
        assert torch.get_num_threads() == 1
        get_algorithm("cql").parse_config({}, {})  # CQL's default: None
        assert torch.get_num_threads() == default_threads() >= 1
        assert default_threads({"OMP_NUM_THREADS": "1"}) == 1  # as Dask's workers have it
        cores = len(os.sched_getaffinity(0))
        assert default_threads({"OMP_NUM_THREADS": "not a number"}) == default_threads({}) == cores
    finally:
        torch.set_num_threads(before)


AFTER_A_CLUSTER = """
import os, torch
import hrl_tasks
from hrl_tasks.algorithms import get_algorithm
with hrl_tasks.Engine.local(n_workers=1, threads_per_worker=1):
    pass
get_algorithm("cql").parse_config({}, {})
print(os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), len(os.sched_getaffinity(0)))
"""


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_a_run_after_an_embedded_cluster_still_takes_a_thread_per_core(tmp_path):
    """Dask's nanny leaves OMP_NUM_THREADS=1 in the driver's os.environ; the default
    reads what the process started with."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", AFTER_A_CLUSTER], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=100)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    omp, threads, cores = done.stdout.split()[-3:]
    assert omp == "1" and threads == cores, done.stdout  # the nanny set it; torch did not take it


# --- the embedded cluster a run starts -------------------------------------------


@pytest.mark.parametrize("name, values, shape", [
    ("ppo", {}, {"n_workers": 2, "threads_per_worker": 1}),
    ("ppo", {"num_workers": 0}, {"n_workers": 1, "threads_per_worker": 1}),
    ("impala", {"num_workers": 4, "num_learners": 1}, {"n_workers": 5, "threads_per_worker": 1}),
    ("apex", {}, {"n_workers": 5, "threads_per_worker": 1}),  # a process per shard and the learner
    ("sac", {}, {"n_workers": 1, "threads_per_worker": 1}),
    ("sac", {"num_replay_shards": 2}, {"n_workers": 3, "threads_per_worker": 1}),
    ("alphazero", {"threads_per_worker": 3}, {"n_workers": 2, "threads_per_worker": 3}),
    ("mpc", {"planner_tasks": 2, "num_workers": 3}, {"n_workers": 3, "threads_per_worker": 1}),
    ("mpc", {}, None),  # the driver plans alone, on a SyncEngine
])  # fmt: skip
def test_the_config_decides_the_embedded_cluster(name, values, shape):
    assert get_config_class(name).from_dict(values).embedded_cluster() == shape


def test_a_config_of_the_algorithm_s_own_class_is_taken_as_built_and_overrides_are_checked():
    from hrl_tasks.algorithms import PPO

    config = PPOConfig.from_dict(lr=3e-4)
    assert PPO.parse_config(config, {}) is config  # parsed once, where it was built
    overridden = PPO.parse_config(config, {"lr": 1})
    assert overridden.lr == 1.0 and isinstance(overridden.lr, float) and config.lr == 3e-4
    with pytest.raises(ConfigError, match=r"has no key 'lrr' \(did you mean 'lr'\?\)"):
        PPO.parse_config(config, {"lrr": 1})
    with pytest.raises(ConfigError, match="PPOConfig.lr must be float, got 'fast'"):
        PPOConfig(lr="fast")  # built directly: its types are checked too


CONFIGS_ALONE = """
import sys
from hrl_tasks.registry import CONFIG_PATHS, get_config_class
for name in sorted(CONFIG_PATHS):
    get_config_class(name).from_dict({})
    heavy = [m for m in ("torch", "distributed") if m in sys.modules]
    assert not heavy, (name, heavy)
print(len(CONFIG_PATHS))
"""


def test_every_algorithm_s_config_is_read_and_checked_without_torch_or_distributed(tmp_path):
    # So `hrl-tasks train` checks a config, and starts the embedded cluster, while the
    # plan and torch import (README: bad input fails before any cluster starts).
    done = subprocess.run([sys.executable, "-c", CONFIGS_ALONE], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) >= 16
