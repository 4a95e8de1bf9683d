import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.search import (
    ACCEPTED_FORMS,
    SearchError,
    choice,
    grid,
    loguniform,
    parse_space_item,
    randint,
    sample_config,
    uniform,
)

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "hrl_tasks" / "search"
finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def bounds(draw, positive=False):
    """``(low, high)`` with ``low < high`` (and ``low > 0`` if ``positive``)."""
    low = draw(st.floats(1e-12, 1e6) if positive else finite)
    high = draw(st.floats(min_value=low, max_value=low + 1e6).filter(lambda h: h > low))
    return low, high


@given(bounds(), seeds)
@settings(deadline=None)
def test_uniform_samples_lie_within_bounds(low_high, seed):
    low, high = low_high
    rng = np.random.default_rng(seed)
    values = [uniform(low, high).sample(rng) for _ in range(20)]
    assert all(low <= v <= high and type(v) is float for v in values)


@given(bounds(positive=True), seeds)
@settings(deadline=None)
def test_loguniform_samples_lie_within_bounds(low_high, seed):
    low, high = low_high
    rng = np.random.default_rng(seed)
    assert all(low <= loguniform(low, high).sample(rng) <= high for _ in range(20))


@given(st.integers(-1000, 1000), st.integers(1, 50), seeds)
@settings(deadline=None)
def test_randint_excludes_high_and_gives_python_ints(low, width, seed):
    rng = np.random.default_rng(seed)
    values = [randint(low, low + width).sample(rng) for _ in range(20)]
    assert all(low <= v < low + width and type(v) is int for v in values)


def test_randint_draws_every_int_below_high():
    rng = np.random.default_rng(0)
    assert {randint(2, 5).sample(rng) for _ in range(200)} == {2, 3, 4}


def test_loguniform_spreads_evenly_over_decades():
    rng = np.random.default_rng(0)
    values = np.array([loguniform(1e-4, 1.0).sample(rng) for _ in range(20_000)])
    per_decade = np.histogram(np.log10(values), bins=[-4, -3, -2, -1, 0])[0] / len(values)
    assert np.allclose(per_decade, 0.25, atol=0.02), per_decade


def test_choice_and_grid_draw_their_values_as_given():
    rng = np.random.default_rng(0)
    values = [1, "a", None, (64, 64)]
    for domain in (choice(values), grid(values)):
        drawn = [domain.sample(rng) for _ in range(200)]
        assert set(drawn) == set(values)


def test_lists_among_values_become_tuples():
    assert choice([[64, 64], [32]]).values == ((64, 64), (32,))


def test_a_space_keeps_constants_and_its_key_order():
    space = {"env": "CartPole-v1", "lr": loguniform(1e-4, 1e-2), "n": randint(1, 3)}
    config = sample_config(space, np.random.default_rng(0))
    assert list(config) == ["env", "lr", "n"] and config["env"] == "CartPole-v1"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: uniform(1, 1), "uniform needs low < high"),
        (lambda: uniform(2, 1), "uniform needs low < high"),
        (lambda: uniform(math.nan, 1), "finite low"),
        (lambda: uniform(0, 10**400), "finite high"),
        (lambda: uniform(True, 2), "needs a number for low"),
        (lambda: uniform("0", 1), "needs a number for low"),
        (lambda: loguniform(0, 1), "loguniform needs low > 0"),
        (lambda: loguniform(-1, 1), "loguniform needs low > 0"),
        (lambda: loguniform(1, 0.5), "loguniform needs low < high"),
        (lambda: randint(3, 3), "high is excluded"),
        (lambda: randint(1.5, 3), "needs an int for low"),
        (lambda: choice([]), "at least one value"),
        (lambda: grid([]), "at least one value"),
        (lambda: choice("abc"), "needs a list of values"),
    ],
)
def test_bad_domains_are_rejected_by_name(make, message):
    with pytest.raises(SearchError, match=re.escape(message)):
        make()


def test_repr_reads_as_the_expression():
    assert repr(loguniform(1e-4, 1e-2)) == "loguniform(0.0001, 0.01)"
    assert repr(randint(1, 11)) == "randint(1, 11)"
    assert repr(choice(["a", None, True])) == "choice(['a', None, True])"
    assert repr(grid([0.1, 0.2])) == "grid([0.1, 0.2])"


literals = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
domains = st.one_of(
    bounds().map(lambda b: uniform(*b)),
    bounds(positive=True).map(lambda b: loguniform(*b)),
    st.tuples(st.integers(-(10**6), 10**6), st.integers(1, 10**6)).map(
        lambda t: randint(t[0], t[0] + t[1])
    ),
    st.lists(st.one_of(literals, st.tuples(literals, literals)), min_size=1).map(choice),
    st.lists(literals, min_size=1).map(grid),
)


@given(domains)
@settings(deadline=None)
def test_the_repr_of_every_domain_parses_back(domain):
    key, parsed = parse_space_item(f"some_key={domain!r}")
    assert key == "some_key" and parsed == domain and repr(parsed) == repr(domain)


def test_parsing_accepts_spaces_keywords_and_signs():
    assert parse_space_item(" lr = loguniform( 1e-4 , 1e-2 ) ") == ("lr", loguniform(1e-4, 1e-2))
    assert parse_space_item("n=randint(low=1, high=5)") == ("n", randint(1, 5))
    assert parse_space_item("x=uniform(-1, +1)") == ("x", uniform(-1, 1))
    assert parse_space_item("h=choice([[64, 64], (32,)])") == ("h", choice([(64, 64), (32,)]))
    # Values one by one, as in `--space 'clip=choice(0.1,0.2,0.3)'`.
    assert parse_space_item("clip=choice(0.1,0.2,0.3)") == ("clip", choice([0.1, 0.2, 0.3]))
    assert parse_space_item("n=grid(7)") == ("n", grid([7]))


@pytest.mark.parametrize(
    "item",
    [
        "lr",
        "=uniform(0, 1)",
        "my lr=uniform(0, 1)",
        "lr=",
        "lr=1e-3",
        "lr=uniform(0, 1",
        "lr=normal(0, 1)",
        "lr=np.uniform(0, 1)",
        "lr=uniform(0, x)",
        "lr=uniform(0, 1 + 1)",
        "lr=uniform(0, 1, 2)",
        "lr=uniform(0, top=1)",
        "lr=uniform(**{'low': 0, 'high': 1})",
        "lr=choice([uniform(0, 1)])",
        "lr=__import__('os').system('true')",
        "lr=uniform(0, 1)[0]",
    ],
)
def test_bad_expressions_get_one_line_naming_the_item_and_the_accepted_forms(item):
    with pytest.raises(SearchError) as info:
        parse_space_item(item)
    message = str(info.value)
    assert "\n" not in message and repr(item) in message and ACCEPTED_FORMS in message


@pytest.mark.parametrize(
    "item, message",
    [
        ("lr=loguniform(0, 1e-2)", "loguniform needs low > 0"),
        ("lr=uniform(1, 0)", "uniform needs low < high"),
        ("n=randint(1.5, 3)", "randint needs an int for low"),
        ("n=choice([])", "at least one value"),
        ("n=uniform(0, 1e999)", "finite high"),
    ],
)
def test_bad_values_are_named_on_one_line(item, message):
    with pytest.raises(SearchError) as info:
        parse_space_item(item)
    assert message in str(info.value) and repr(item) in str(info.value)
    assert "\n" not in str(info.value)


def test_the_search_package_imports_neither_torch_nor_a_cluster():
    heavy = re.compile(r"^\s*(import|from)\s+(torch|distributed|dask|hrl_tasks\.(?!search))", re.M)
    for path in PACKAGE.glob("*.py"):
        assert not heavy.search(path.read_text()), f"{path.name} imports something heavy"
    code = "import sys, hrl_tasks.search; print(sorted({'torch', 'optuna'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
