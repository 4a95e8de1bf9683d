import itertools
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.search import (
    SearchError,
    choice,
    grid,
    grid_points,
    loguniform,
    make_sampler,
    randint,
    uniform,
)
from hrl_tasks.search.samplers import optuna_suggest

SPACE = {
    "env": "CartPole-v1",
    "lr": loguniform(1e-4, 1e-2),
    "clip": grid([0.1, 0.2, 0.3]),
    "gamma": uniform(0.9, 0.999),
    "hidden": grid([(64, 64), (256, 256)]),
    "iters": randint(1, 4),
    "act": choice(["tanh", "relu"]),
}


def suggestions(sampler) -> list[dict]:
    configs = []
    while (config := sampler.suggest(f"trial_{len(configs)}")) is not None:
        configs.append(config)
    return configs


def within(config: dict) -> bool:
    return (
        1e-4 <= config["lr"] <= 1e-2
        and 0.9 <= config["gamma"] <= 0.999
        and config["iters"] in (1, 2, 3)
        and type(config["iters"]) is int
        and config["act"] in ("tanh", "relu")
        and config["env"] == "CartPole-v1"
    )


@given(st.integers(1, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_random_repeats_the_full_grid_num_samples_times(num_samples, seed):
    sampler = make_sampler("random", SPACE, num_samples=num_samples, seed=seed)
    configs = suggestions(sampler)
    assert len(configs) == sampler.num_trials == num_samples * 3 * 2
    points = Counter((c["clip"], c["hidden"]) for c in configs)
    assert points == {
        p: num_samples for p in itertools.product(SPACE["clip"].values, SPACE["hidden"].values)
    }
    assert all(within(c) and list(c) == list(SPACE) for c in configs)
    assert sampler.suggest("one more") is None


def test_random_without_grid_keys_gives_num_samples_configs():
    space = {"lr": loguniform(1e-4, 1e-2)}
    assert len(suggestions(make_sampler("random", space, num_samples=5, seed=0))) == 5


def test_random_is_deterministic_given_a_seed():
    first = suggestions(make_sampler("random", SPACE, num_samples=2, seed=7))
    again = suggestions(make_sampler("random", SPACE, num_samples=2, seed=7))
    other = suggestions(make_sampler("random", SPACE, num_samples=2, seed=8))
    assert first == again and first != other


def test_grid_enumerates_every_combination_of_grid_and_choice_keys():
    space = {
        "env": "Pendulum-v1",
        "a": grid([1, 2]),
        "b": choice(["x", "y", "z"]),
        "c": grid([None]),
    }
    configs = suggestions(make_sampler("grid", space, num_samples=1, seed=None))
    expected = [
        {"env": "Pendulum-v1", "a": a, "b": b, "c": c}
        for a in (1, 2)
        for b in ("x", "y", "z")
        for c in (None,)
    ]
    assert configs == expected


def test_grid_repeats_itself_num_samples_times():
    configs = suggestions(make_sampler("grid", {"a": grid([1, 2, 3])}, num_samples=2, seed=0))
    assert configs == [{"a": a} for a in (1, 2, 3, 1, 2, 3)]


def test_grid_points_without_grid_keys_is_one_empty_point():
    assert grid_points({"lr": uniform(0, 1), "env": "x"}) == [{}]


@pytest.mark.parametrize("domain", [uniform(0, 1), loguniform(1e-3, 1), randint(1, 3)])
def test_grid_rejects_keys_without_a_list_of_values(domain):
    with pytest.raises(SearchError, match=r"lr=.*random or optuna"):
        make_sampler("grid", {"lr": domain, "a": grid([1])}, num_samples=1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="bayes"), "unknown sampler 'bayes'; available: random, grid, optuna"),
        (dict(num_samples=0), "num_samples must be at least 1"),
        (dict(num_samples=2.5), "num_samples must be an int"),
        (dict(mode="maximize"), "mode must be 'max' or 'min'"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = dict(name="random", space=SPACE, num_samples=1) | kwargs
    with pytest.raises(SearchError, match=message):
        make_sampler(**args)


def test_missing_optuna_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # makes `import optuna` fail
    with pytest.raises(ImportError, match="pip install optuna"):
        make_sampler("optuna", {"lr": uniform(0, 1)}, num_samples=2, metric="loss", mode="min")


class RecordingTrial:
    """Stands in for an Optuna trial: records each suggest call, returns its low end."""

    def __init__(self):
        self.calls = []

    def suggest_float(self, name, low, high, log=False):
        self.calls.append(("float", name, low, high, log))
        return low

    def suggest_int(self, name, low, high):
        self.calls.append(("int", name, low, high))
        return low

    def suggest_categorical(self, name, choices):
        self.calls.append(("categorical", name, choices))
        return choices[-1]


def test_domains_map_to_optunas_suggest_calls():
    trial = RecordingTrial()
    assert optuna_suggest(trial, "g", uniform(0.9, 0.99)) == 0.9
    assert optuna_suggest(trial, "lr", loguniform(1e-4, 1e-2)) == 1e-4
    assert optuna_suggest(trial, "n", randint(1, 4)) == 1
    assert optuna_suggest(trial, "act", choice(["tanh", "relu"])) == "relu"
    assert optuna_suggest(trial, "h", choice([(64,), (32, 32)])) == (32, 32)
    assert optuna_suggest(trial, "env", "CartPole-v1") == "CartPole-v1"
    assert trial.calls == [
        ("float", "g", 0.9, 0.99, False),
        ("float", "lr", 1e-4, 1e-2, True),
        ("int", "n", 1, 3),  # Optuna's high is included
        ("categorical", "act", ["tanh", "relu"]),
        ("categorical", "h", [0, 1]),  # non-plain values are chosen by position
    ]


OPTUNA_SPACE = {
    "env": "CartPole-v1",
    "lr": loguniform(1e-4, 1e-2),
    "gamma": uniform(0.9, 0.999),
    "iters": randint(1, 4),
    "act": choice(["tanh", "relu"]),
}


def run_optuna(seed: int, num_samples: int = 14) -> list[dict]:
    pytest.importorskip("optuna")
    sampler = make_sampler(
        "optuna", OPTUNA_SPACE, num_samples=num_samples, seed=seed, metric="loss", mode="min"
    )
    configs = []
    while (config := sampler.suggest(len(configs))) is not None:
        value = None if len(configs) == 3 else (config["lr"] - 1e-3) ** 2 + config["iters"]
        sampler.observe(len(configs), config, value)  # trial 3 failed
        configs.append(config)
    return configs


def test_optuna_proposes_num_samples_configs_within_the_space():
    configs = run_optuna(seed=0)
    assert len(configs) == 14 and all(within(c) for c in configs)


def test_optuna_is_deterministic_given_a_seed():
    assert run_optuna(seed=3) == run_optuna(seed=3)


def test_optuna_rejects_grid_keys_and_needs_a_metric():
    pytest.importorskip("optuna")
    with pytest.raises(SearchError, match="does not enumerate grid keys"):
        make_sampler("optuna", {"a": grid([1, 2])}, num_samples=2, metric="loss")
    with pytest.raises(SearchError, match="learns from a metric"):
        make_sampler("optuna", {"a": choice([1, 2])}, num_samples=2)


def test_optuna_names_trials_it_does_not_know():
    pytest.importorskip("optuna")
    sampler = make_sampler("optuna", {"a": choice([1, 2])}, num_samples=2, metric="loss")
    config = sampler.suggest("t0")
    with pytest.raises(SearchError, match="already suggested"):
        sampler.suggest("t0")
    with pytest.raises(SearchError, match="'t9' was not suggested"):
        sampler.observe("t9", config, 1.0)
