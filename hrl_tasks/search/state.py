"""A search's decisions as plain JSON values, and back: what a search's state file holds.

Samplers and trial schedulers write their state with ``to_state()`` and are rebuilt
with ``from_state(state)``, in these terms:

- `to_json` / `from_json`: a config value, a stop condition or a trial id. JSON has
  no tuples, and a stop condition ``("<=", 0.1)`` or a choice of ``(64, 64)`` must
  come back as a tuple, so a tuple is written ``{"__tuple__": [...]}``; lists, dicts
  with string keys, strings, numbers, bools and None are written as they are.
- `rng_to_json` / `rng_from_json`: a numpy ``Generator`` as its bit generator's state
  (PCG64's two 128-bit ints), so that a resumed search draws what it would have.
- `space_to_state` / `space_from_state`: a search space, each domain as its name and
  arguments (``{"domain": "loguniform", "low": 0.0001, "high": 0.01}``), each constant
  as ``{"constant": value}``.

Nothing in a state is code: reading one builds only the package's own classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from hrl_tasks.search.space import DOMAINS, SearchError, is_domain

TUPLE = "__tuple__"
"""The key of the one-key object that stands for a tuple."""

BIT_GENERATOR = "PCG64"
"""The bit generator of ``numpy.random.default_rng``, the only one a state holds."""


def to_json(value: Any) -> Any:
    """``value`` as plain JSON values: tuples tagged, numpy scalars as Python numbers.

    Raises:
        SearchError: for anything else (an object, a set, a dict with keys that are
            not strings, a dict whose only key is the tuple tag), naming it.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {TUPLE: [to_json(v) for v in value]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value) or list(value) == [TUPLE]:
            raise SearchError(f"a search's state cannot hold the dict {value!r} as JSON")
        return {key: to_json(v) for key, v in value.items()}
    raise SearchError(
        f"a search's state cannot hold {value!r} ({type(value).__name__}) as JSON: "
        f"use numbers, strings, bools, None, and lists, tuples or dicts of them"
    )


def from_json(value: Any) -> Any:
    """What `to_json` wrote, with its tuples back."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if isinstance(value, dict):
        if list(value) == [TUPLE]:
            return tuple(from_json(v) for v in value[TUPLE])
        return {key: from_json(v) for key, v in value.items()}
    return value


def rng_to_json(rng: np.random.Generator) -> dict:
    """The state of ``rng`` (made by ``numpy.random.default_rng``) as plain JSON values.

    Raises:
        SearchError: for a generator on another bit generator than PCG64.
    """
    state = rng.bit_generator.state
    if state["bit_generator"] != BIT_GENERATOR:
        raise SearchError(
            f"only {BIT_GENERATOR} generators are saved, not {state['bit_generator']}"
        )
    return state


def rng_from_json(state: Mapping[str, Any]) -> np.random.Generator:
    """A generator that draws what the one `rng_to_json` read would have drawn next.

    Raises:
        SearchError: for a state that is not PCG64's.
    """
    if not isinstance(state, Mapping) or state.get("bit_generator") != BIT_GENERATOR:
        raise SearchError(f"not the state of a {BIT_GENERATOR} generator: {state!r}")
    rng = np.random.Generator(np.random.PCG64())
    try:
        rng.bit_generator.state = dict(state)
    except (TypeError, ValueError, KeyError) as exc:
        raise SearchError(f"not the state of a {BIT_GENERATOR} generator: {exc}") from None
    return rng


def space_to_state(space: Mapping[str, Any]) -> dict:
    """``space`` as plain JSON values, in its key order.

    Raises:
        SearchError: for a constant that plain JSON cannot hold.
    """
    return {
        key: domain_to_state(value) if is_domain(value) else {"constant": to_json(value)}
        for key, value in space.items()
    }


def space_from_state(state: Mapping[str, Any]) -> dict:
    """The space that `space_to_state` wrote.

    Raises:
        SearchError: for an entry that is neither a domain nor a constant.
    """
    return {key: entry_from_state(key, entry) for key, entry in state.items()}


def entry_from_state(key: str, entry: Any) -> Any:
    """A domain or a constant of a space, as `space_to_state` wrote it under ``key``."""
    if isinstance(entry, Mapping) and "domain" in entry:
        return domain_from_state(entry)
    if isinstance(entry, Mapping) and list(entry) == ["constant"]:
        return from_json(entry["constant"])
    raise SearchError(
        f"the space's {key!r} in a search's state is neither a domain nor a constant: {entry!r}"
    )


def domain_to_state(domain: Any) -> dict:
    """A domain as its name and arguments: ``{"domain": "choice", "values": [...]}``."""
    arguments = {f.name: getattr(domain, f.name) for f in dataclasses.fields(domain)}
    if "values" in arguments:  # a list in the file, each value as to_json writes it
        arguments["values"] = [to_json(v) for v in arguments["values"]]
    return {"domain": type(domain).__name__, **arguments}


def domain_from_state(state: Mapping[str, Any]) -> Any:
    """The domain that `domain_to_state` wrote.

    Raises:
        SearchError: naming an unknown domain, or arguments it refuses.
    """
    arguments = {key: from_json(v) for key, v in state.items() if key != "domain"}
    cls = DOMAINS.get(state["domain"])
    if cls is None:
        raise SearchError(f"unknown domain {state['domain']!r} in a search's state")
    try:
        return cls(**arguments)
    except TypeError:
        message = f"wrong arguments for {cls.__name__} in a search's state: {arguments}"
        raise SearchError(message) from None


def restored(state: Mapping[str, Any], classes: tuple, what: str):
    """The object of ``classes`` (each with a ``kind`` and ``from_state``) whose
    ``to_state()`` is ``state``; ``what`` names them in errors ("sampler").

    Raises:
        SearchError: for an object of a class that was named, not saved (one from
            outside the package), or an unknown kind.
    """
    by_kind = {cls.kind: cls for cls in classes}
    if state.get("kind") is None:
        raise SearchError(
            f"the search ran with a {what} of class {state.get('class')}, which is not "
            f"saved: a search resumes with the {', '.join(by_kind)} {what}s only"
        )
    if state["kind"] not in by_kind:
        raise SearchError(f"unknown {what} {state['kind']!r} in a search's state")
    return by_kind[state["kind"]].from_state(state)
