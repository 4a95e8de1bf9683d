"""Search spaces: what each hyper-parameter may be, and how to draw it.

A space is a plain dict from config keys to domains; any other value is a
constant that every trial gets as it is::

    space = {
        "env": "CartPole-v1",            # constant
        "lr": loguniform(1e-4, 1e-2),    # log-uniform float
        "gamma": uniform(0.95, 0.999),   # uniform float
        "num_sgd_iter": randint(1, 11),  # int in 1..10 (11 excluded, as in numpy)
        "hidden": choice([(64, 64), (256, 256)]),
        "clip_param": grid([0.1, 0.2, 0.3]),  # every value, see samplers
    }

Each domain's ``repr`` is the expression that builds it, and
`parse_space_item` reads that expression back from a command line
(``--space lr=loguniform(1e-4,1e-2)``); the domains are lower-case classes for
that reason. Only numpy is imported here, so a command's ``--help`` stays light.
"""

from __future__ import annotations

import ast
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

ACCEPTED_FORMS = (
    "uniform(LOW, HIGH), loguniform(LOW, HIGH), randint(LOW, HIGH), "
    "choice([VALUE, ...]), grid([VALUE, ...])"
)
"""The expressions `parse_space_item` reads, as its error messages name them."""

Mode = Literal["max", "min"]
"""Whether a larger (``"max"``) or a smaller (``"min"``) metric is better."""


class SearchError(ValueError):
    """A search space, sampler or scheduler that is set up wrongly."""


def check_mode(mode: str) -> Mode:
    """``mode`` if it is ``"max"`` or ``"min"``.

    Raises:
        SearchError: naming the two accepted modes.
    """
    if mode not in ("max", "min"):
        raise SearchError(f"mode must be 'max' or 'min', got {mode!r}")
    return mode


def _real(owner: str, name: str, value: Any) -> float:
    """``value`` as a finite float, or a SearchError naming ``owner``'s argument."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise SearchError(f"{owner} needs a number for {name}, got {value!r}")
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond the largest float
        as_float = math.inf
    if not math.isfinite(as_float):
        raise SearchError(f"{owner} needs a finite {name}, got {value!r}")
    return as_float


def _freeze(value: Any) -> Any:
    """Lists become tuples (nested too), so that domains stay hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _values(owner: str, values: Any) -> tuple:
    """``values`` as a non-empty tuple, or a SearchError naming ``owner``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise SearchError(f"{owner} needs a list of values, e.g. {owner}([1, 2]); got {values!r}")
    if not values:
        raise SearchError(f"{owner} needs at least one value, got an empty list")
    return tuple(_freeze(v) for v in values)


@dataclass(frozen=True, repr=False)
class uniform:
    """A float drawn uniformly from ``[low, high)``.

    Raises:
        SearchError: if a bound is not a finite number, or ``low >= high``.
    """

    low: float
    high: float

    def __post_init__(self):
        object.__setattr__(self, "low", _real("uniform", "low", self.low))
        object.__setattr__(self, "high", _real("uniform", "high", self.high))
        if self.low >= self.high:
            raise SearchError(f"uniform needs low < high, got {self!r}")

    def sample(self, rng: np.random.Generator) -> float:
        """One value, within the bounds."""
        return min(float(rng.uniform(self.low, self.high)), self.high)

    def __repr__(self) -> str:
        return f"uniform({self.low!r}, {self.high!r})"


@dataclass(frozen=True, repr=False)
class loguniform:
    """A float whose logarithm is uniform in ``[log(low), log(high))``: every decade
    between ``low`` and ``high`` is equally likely (learning rates, ...).

    Raises:
        SearchError: if a bound is not a finite number, ``low <= 0``, or ``low >= high``.
    """

    low: float
    high: float

    def __post_init__(self):
        object.__setattr__(self, "low", _real("loguniform", "low", self.low))
        object.__setattr__(self, "high", _real("loguniform", "high", self.high))
        if self.low <= 0:
            raise SearchError(f"loguniform needs low > 0, got {self!r}")
        if self.low >= self.high:
            raise SearchError(f"loguniform needs low < high, got {self!r}")

    def sample(self, rng: np.random.Generator) -> float:
        """One value, within the bounds (exp(log(x)) may round past them otherwise)."""
        value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return min(max(value, self.low), self.high)

    def __repr__(self) -> str:
        return f"loguniform({self.low!r}, {self.high!r})"


@dataclass(frozen=True, repr=False)
class randint:
    """An int drawn uniformly from ``low, low + 1, ..., high - 1``: ``high`` is
    excluded, as in ``numpy.random.Generator.integers`` and ``range``.

    Raises:
        SearchError: if a bound is not an int, or ``low >= high`` (no int to draw).
    """

    low: int
    high: int

    def __post_init__(self):
        for name in ("low", "high"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise SearchError(f"randint needs an int for {name}, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.low >= self.high:
            raise SearchError(
                f"randint needs low < high (high is excluded), got {self!r}; "
                f"randint({self.low}, {self.low + 1}) is the constant {self.low}"
            )

    def sample(self, rng: np.random.Generator) -> int:
        """One value, a Python int (config checks reject numpy ints)."""
        return int(rng.integers(self.low, self.high))

    def __repr__(self) -> str:
        return f"randint({self.low!r}, {self.high!r})"


@dataclass(frozen=True, repr=False)
class choice:
    """One of ``values``, each equally likely. Lists among the values become tuples.

    Its ``repr`` parses back when the values are literals (numbers, strings,
    bools, None, and tuples of them).

    Raises:
        SearchError: if ``values`` is not a list or is empty.
    """

    values: tuple

    def __post_init__(self):
        object.__setattr__(self, "values", _values("choice", self.values))

    def sample(self, rng: np.random.Generator) -> Any:
        """One of the values, as it was given."""
        return self.values[int(rng.integers(len(self.values)))]

    def __repr__(self) -> str:
        return f"choice({list(self.values)!r})"


@dataclass(frozen=True, repr=False)
class grid:
    """Every one of ``values``, in turn: the samplers enumerate grid keys exhaustively
    and cross them with each other (see :mod:`hrl_tasks.search.samplers`).

    Raises:
        SearchError: if ``values`` is not a list or is empty.
    """

    values: tuple

    def __post_init__(self):
        object.__setattr__(self, "values", _values("grid", self.values))

    def sample(self, rng: np.random.Generator) -> Any:
        """One of the values drawn at random (for a resample; samplers enumerate them)."""
        return self.values[int(rng.integers(len(self.values)))]

    def __repr__(self) -> str:
        return f"grid({list(self.values)!r})"


Domain = uniform | loguniform | randint | choice | grid
"""Any of the five domains; other values in a space are constants."""

DOMAINS: Mapping[str, type] = {
    cls.__name__: cls for cls in (uniform, loguniform, randint, choice, grid)
}
"""The domains by the name their expressions call them."""


def is_domain(value: Any) -> bool:
    """Whether ``value`` is a domain (not a constant)."""
    return isinstance(value, Domain)


def sample_config(space: Mapping[str, Any], rng: np.random.Generator) -> dict:
    """One config: each domain sampled (in the space's key order), constants as they are."""
    return {key: value.sample(rng) if is_domain(value) else value for key, value in space.items()}


def parse_space_item(text: str) -> tuple[str, Domain]:
    """Read a command line's ``KEY=EXPR``, e.g. ``lr=loguniform(1e-4,1e-2)``.

    ``EXPR`` is one of the five domain calls with literal arguments (numbers,
    strings, bools, None; lists or tuples of them for ``choice`` and ``grid``,
    whose values may also be given one by one: ``choice(0.1,0.2,0.3)``), given
    by position or by name (``randint(low=1, high=5)``). It is read with
    ``ast``, never evaluated.

    Returns:
        The key and its domain, e.g. ``("lr", loguniform(0.0001, 0.01))``.

    Raises:
        SearchError: one line naming the item, what is wrong, and the accepted forms.
    """
    key, sep, expression = text.partition("=")
    key = key.strip()
    if not sep:
        raise _bad(text, "no '=' between KEY and EXPR")
    if not key or any(c.isspace() for c in key):
        raise _bad(text, f"{key!r} is not a config key")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError):  # ValueError: a null byte
        raise _bad(text, f"{expression.strip()!r} is not an expression") from None
    if not (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name)):
        raise _bad(text, f"{expression.strip()!r} is not a call of a search-space helper")
    cls = DOMAINS.get(tree.func.id)
    if cls is None:
        raise _bad(text, f"unknown helper {tree.func.id!r}")
    try:
        args = [_literal(node) for node in tree.args]
        kwargs = {kw.arg: _literal(kw.value) for kw in tree.keywords if kw.arg is not None}
    except ValueError as exc:
        raise _bad(text, str(exc)) from None
    if len(kwargs) != len(tree.keywords):
        raise _bad(text, "** arguments are not accepted")
    if cls in (choice, grid) and (
        len(args) > 1 or (args and not isinstance(args[0], (list, tuple)))
    ):
        args = [list(args)]  # choice(0.1, 0.2, 0.3) as a shell user writes it
    try:
        domain = cls(*args, **kwargs)
    except TypeError:
        raise _bad(text, f"wrong arguments for {cls.__name__}") from None
    except SearchError as exc:
        raise SearchError(f"--space {text!r}: {exc}") from None
    return key, domain


def _literal(node: ast.AST) -> Any:
    """The value of a literal node: a number (signed too), string, bool, None, or a
    list or tuple of literals. Raises ValueError for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, type(None))):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(item) for item in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    raise ValueError(f"{ast.unparse(node)!r} is not a literal (a number, string, bool or None)")


def _bad(text: str, reason: str) -> SearchError:
    return SearchError(
        f"--space {text!r}: {reason}; write KEY=EXPR with EXPR one of {ACCEPTED_FORMS}"
    )
