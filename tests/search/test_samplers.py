import itertools
import json
import math
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.search import (
    SAMPLERS,
    SearchError,
    choice,
    grid,
    grid_points,
    loguniform,
    make_sampler,
    randint,
    sampler_from_state,
    uniform,
)
from hrl_tasks.search.samplers import Sampler, optuna_config, optuna_distributions

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


def test_domains_map_to_optunas_distributions_and_back():
    pytest.importorskip("optuna")
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space = {"g": uniform(0.9, 0.99), "lr": loguniform(1e-4, 1e-2), "n": randint(1, 4)}
    space |= {"act": choice(["tanh", "relu"]), "h": choice([(64,), (32, 32)]), "env": "x"}
    assert optuna_distributions(space) == {
        "g": FloatDistribution(0.9, 0.99),
        "lr": FloatDistribution(1e-4, 1e-2, log=True),
        "n": IntDistribution(1, 3),  # Optuna's high is included
        "act": CategoricalDistribution(["tanh", "relu"]),
        "h": CategoricalDistribution([0, 1]),  # non-plain values are chosen by position
    }
    params = {"g": 0.9, "lr": 1e-4, "n": 1, "act": "relu", "h": 1}
    assert optuna_config(space, params) == {**params, "h": (32, 32), "env": "x"}


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


# --- a sampler's state, written to a file and read back ------------------------------------

GRID_SPACE = {"a": grid([1, 2, 3]), "b": choice(["x", "y"]), "h": choice([(64, 64), (32,)])}
RESUMED = {
    "random": dict(space=SPACE, num_samples=2),  # 12 configs
    "grid": dict(space=GRID_SPACE, num_samples=2),  # 24 configs
    "optuna": dict(space={**OPTUNA_SPACE, "h": choice([(64,), (32, 32)])}, num_samples=14),
}


def new_sampler(name: str) -> Sampler:
    if name == "optuna":
        pytest.importorskip("optuna")
    return make_sampler(name, seed=5, metric="loss", mode="min", **RESUMED[name])


def loss(config: dict) -> float | None:
    """A metric of a config; None (a failed trial) for some."""
    if config.get("act") == "tanh" and config.get("iters") == 2:
        return None
    return math.log10(config.get("lr", 1e-3)) ** 2 + config.get("iters", 0)


def run_lagged(sampler: Sampler, ids, waiting=None) -> tuple[list[dict], tuple | None]:
    """Propose a config for each of ``ids``, observing each trial once the next one is
    proposed (as in a search, one trial is still running when the next starts).

    Args:
        waiting: the trial proposed before ``ids[0]`` and not observed yet.

    Returns:
        The configs proposed, and the trial proposed last, not observed yet.
    """
    configs = []
    for trial_id in ids:
        config = sampler.suggest(trial_id)
        if config is None:
            break
        configs.append(config)
        if waiting is not None:
            sampler.observe(*waiting)
        waiting = (trial_id, config, loss(config))
    return configs, waiting


def read_back(sampler: Sampler, path) -> Sampler:
    """A new sampler from ``sampler``'s state, written to the file ``path`` as JSON."""
    path.write_text(json.dumps(sampler.to_state()))
    return sampler_from_state(json.loads(path.read_text()))


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("cut", [0, 1, 5, 11])
def test_a_sampler_read_back_from_a_file_proposes_what_it_would_have(name, cut, tmp_path):
    whole, _ = run_lagged(new_sampler(name), range(30))
    sampler = new_sampler(name)
    first, waiting = run_lagged(sampler, range(cut))
    again = read_back(sampler, tmp_path / "sampler.json")
    assert type(again) is type(sampler) and again.num_trials == sampler.num_trials
    rest, _ = run_lagged(again, range(cut, 30), waiting)
    assert first + rest == whole
    assert len(whole) == again.num_trials and again.suggest("one more") is None


def test_an_optuna_sampler_read_back_keeps_its_trials_and_those_still_running(tmp_path):
    sampler = new_sampler("optuna")
    configs, (running, config, _) = run_lagged(sampler, range(4))
    state = read_back(sampler, tmp_path / "sampler.json").to_state()
    assert [t["state"] for t in state["trials"]] == ["COMPLETE"] * 3 + ["RUNNING"]
    assert state["pending"] == [[running, 3]] and state["trials"][3]["params"]["h"] in (0, 1)
    again = sampler_from_state(state)
    with pytest.raises(SearchError, match="already suggested"):
        again.suggest(running)
    again.observe(running, config, 1.0)  # told once read back
    told = {**state["trials"][3], "state": "COMPLETE", "value": 1.0}
    assert again.to_state()["trials"][3] == told


def test_a_sampler_of_another_class_is_named_not_saved():
    class EveryOther(Sampler):
        num_trials = 2

        def suggest(self, trial_id):
            return {"lr": 1e-3}

    state = EveryOther().to_state()
    assert state["kind"] is None and state["class"].endswith("EveryOther")
    with pytest.raises(SearchError, match="EveryOther, which is not saved"):
        sampler_from_state(state)
