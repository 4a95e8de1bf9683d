"""Any dict given to ``from_dict`` gives a config that passes every check, or a
one-line ConfigError that names an offending key; never another exception."""

import dataclasses
import math
import types
import typing
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.algorithms import ALGORITHMS, ConfigError
from hrl_tasks.algorithms.config import bounds_of, check_type

INTS = st.one_of(
    st.sampled_from([0, 1, -1, 2, 64, 1000, 100_000, 2**63 - 1, 2**63, 10**400]),
    st.integers(-(2**70), 2**70),
)
FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1.5, 1e-3, -1e-3, 1e9]),
    st.sampled_from([math.inf, -math.inf, math.nan]),
    st.floats(),
)
scalars = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=6))
anything = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.tuples(scalars, scalars),
    st.dictionaries(st.text(max_size=3), scalars, max_size=2),
)


def typed(hint) -> st.SearchStrategy:
    """Values of the type ``hint`` names, in range or not."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return st.one_of(*map(typed, typing.get_args(hint)))
    if typing.get_origin(hint) is tuple:
        return st.lists(typed(typing.get_args(hint)[0]), max_size=3)
    simple = {int: INTS, float: FLOATS, bool: st.booleans(), str: st.text(max_size=12)}
    return st.none() if hint is type(None) else simple.get(hint, anything)


@st.composite
def typos(draw, names: list[str]) -> str:
    """A key one edit away from a real one (it may be a real key again)."""
    name = draw(st.sampled_from(names))
    i = draw(st.integers(0, len(name) - 1))
    edit = draw(st.sampled_from(["drop", "double", "swap", "upper", "plural"]))
    if edit == "drop":
        return name[:i] + name[i + 1 :]
    if edit == "double":
        return name[:i] + name[i] + name[i:]
    if edit == "swap":
        return name[:i] + name[i + 1 : i + 2] + name[i] + name[i + 2 :]
    return name.upper() if edit == "upper" else name + "s"


@st.composite
def config_dicts(draw, cls) -> dict:
    """Up to three known keys, each with a value of its type (in range or not) or of any
    type; sometimes a typo or a stray key."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    known = {}
    for key in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        known[key] = draw(anything if draw(st.integers(0, 3)) == 0 else typed(hints[key]))
    stray = st.one_of(typos(names), st.text(min_size=1, max_size=12))
    unknown = (
        draw(st.dictionaries(stray, anything, max_size=1)) if draw(st.integers(0, 3)) == 0 else {}
    )
    return {**known, **unknown}


def assert_passes_every_check(config, values: dict) -> None:
    cls = type(config)
    hints, bounds = typing.get_type_hints(cls), bounds_of(cls)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        assert check_type(cls.__name__, f.name, value, hints[f.name]) == value
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, bool) or not isinstance(item, int | float):
                continue
            assert isinstance(item, int) or math.isfinite(item), f.name
            assert item in bounds[f.name], (f.name, item)
    if cls.__name__ == "DQNConfig":
        assert config.learning_starts <= config.buffer_size
        assert config.train_batch_size <= config.buffer_size
    if cls.__name__ == "ApeXConfig":
        assert config.learning_starts <= config.buffer_size
        assert config.num_replay_shards <= config.buffer_size
    for key, value in values.items():
        if key == "policies" and value is not None:  # each spec normalized to a PolicySpec
            assert set(config.policies) == set(value)
            continue
        assert getattr(config, key) == as_tuples(value)


def as_tuples(value):
    """Lists, nested ones too, as the tuples a config keeps of them."""
    return tuple(map(as_tuples, value)) if isinstance(value, list) else value


def names_an_offending_key(message: str, cls, values: dict) -> bool:
    owner, fields = cls.__name__, {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in fields and f"{owner} has no key" in message and repr(key) in message:
            return True
        named = f"{owner}.{key} must" in message or f"{owner}.{key}[" in message  # an entry
        if key in fields and (named or f"<= {key} (" in message):
            return True
    return False


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_from_dict_returns_a_valid_config_or_names_the_key(name):
    cls = ALGORITHMS[name].config_class

    @settings(
        max_examples=80, deadline=timedelta(milliseconds=500), database=None, derandomize=True
    )  # the same examples each run; bench/fuzz.py explores
    @given(config_dicts(cls))
    def check(values):
        try:
            config = cls.from_dict(values)
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(cls.__name__), message
            assert names_an_offending_key(message, cls, values), (message, values)
        else:
            assert_passes_every_check(config, values)

    check()


@pytest.mark.parametrize("name", ["dqn", "apex", "sac", "td3"])
def test_replay_sizes_fit_together_or_are_named(name):
    cls = ALGORITHMS[name].config_class
    keys = ["buffer_size", "learning_starts", "train_batch_size", "num_replay_shards"]
    sizes = st.fixed_dictionaries({k: st.integers(0, 300) for k in keys if hasattr(cls, k)})

    @settings(
        max_examples=60, deadline=timedelta(milliseconds=500), database=None, derandomize=True
    )
    @given(sizes)
    def check(values):
        try:
            config = cls.from_dict(values)
        except ConfigError as exc:
            assert names_an_offending_key(str(exc), cls, values), (str(exc), values)
        else:
            assert_passes_every_check(config, values)

    check()
