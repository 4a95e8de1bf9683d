"""A search's decisions as plain JSON values: values, spaces and random generators."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.search import SearchError, choice, grid, loguniform, randint, uniform
from hrl_tasks.search.state import (
    from_json,
    rng_from_json,
    rng_to_json,
    space_from_state,
    space_to_state,
    to_json,
)

plain = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    plain,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(values)
@settings(max_examples=200, deadline=None)
def test_a_value_comes_back_from_json_text_as_it_was_tuples_too(value):
    assert from_json(json.loads(json.dumps(to_json(value)))) == value
    assert _kinds(from_json(json.loads(json.dumps(to_json(value))))) == _kinds(value)


def _kinds(value):
    """The value's shape with the types of its containers (tuple and list differ)."""
    if isinstance(value, (list, tuple)):
        return type(value), [_kinds(v) for v in value]
    if isinstance(value, dict):
        return dict, {k: _kinds(v) for k, v in value.items()}
    return type(value)


def test_a_stop_condition_is_readable_and_nan_and_numpy_numbers_are_kept():
    text = json.dumps(to_json({"loss": ("<=", 0.1), "iteration": np.int64(4)}))
    assert text == '{"loss": {"__tuple__": ["<=", 0.1]}, "iteration": 4}'
    assert math.isnan(from_json(json.loads(json.dumps(to_json(math.nan)))))


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, {1: "a"}, {"__tuple__": [1]}, np.zeros(2)], ids=repr
)
def test_what_plain_json_cannot_hold_is_refused_by_name(value):
    with pytest.raises(SearchError, match="cannot hold"):
        to_json(value)


def test_a_space_comes_back_with_every_domain_and_constant():
    space = {"env": "CartPole-v1", "hidden": (64, 64), "lr": loguniform(1e-4, 1e-2)}
    space |= {"gamma": uniform(0.9, 0.999), "iters": randint(1, 11), "clip": grid([0.1, 0.2])}
    space |= {"act": choice(["tanh", None, (32, 32)])}
    state = json.loads(json.dumps(space_to_state(space)))
    assert state["lr"] == {"domain": "loguniform", "low": 1e-4, "high": 1e-2}
    assert state["env"] == {"constant": "CartPole-v1"}
    again = space_from_state(state)
    assert again == space and list(again) == list(space)
    assert again["act"].values == ("tanh", None, (32, 32))


@pytest.mark.parametrize(
    "state, says",
    [
        ({"lr": {"domain": "eval", "low": 1}}, "unknown domain 'eval'"),
        ({"lr": {"domain": "uniform", "low": 1}}, "wrong arguments for uniform"),
        ({"lr": {"domain": "uniform", "low": 2, "high": 1}}, "low < high"),
        ({"lr": 3}, "neither a domain nor a constant"),
    ],
)
def test_a_space_that_is_not_one_is_refused(state, says):
    with pytest.raises(SearchError, match=says):
        space_from_state(state)


def test_a_generator_read_back_draws_what_it_would_have():
    rng = np.random.default_rng(7)
    rng.random(5)
    again = rng_from_json(json.loads(json.dumps(rng_to_json(rng))))
    assert again.random(4).tolist() == rng.random(4).tolist()
    with pytest.raises(SearchError, match="PCG64"):
        rng_to_json(np.random.Generator(np.random.MT19937(0)))
    with pytest.raises(SearchError, match="PCG64"):
        rng_from_json({"bit_generator": "MT19937", "state": {}})
    with pytest.raises(SearchError, match="PCG64"):
        rng_from_json({"bit_generator": "PCG64", "state": {"state": "x"}})
