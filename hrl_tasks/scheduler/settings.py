"""The engine's settings, the Dask way: the ``hrl-tasks`` section of ``dask.config``.

Their defaults ship in ``hrl_tasks/hrl_tasks.yaml`` (as dask-jobqueue's ship in
``jobqueue.yaml``), added to Dask's defaults when this module is imported. A user sets
them as any Dask setting: in a YAML file under ``~/.config/dask/``, with
``DASK_HRL_TASKS__<NAME>`` environment variables (``DASK_HRL_TASKS__ROUTE=dask``), or
``dask.config.set({"hrl-tasks.route": "dask"})``. An argument (``Engine(route=...)``)
overrides them all; ``HRL_TASKS_ROUTE`` and ``HRL_TASKS_VALIDATE``, the engine's
variables from before, stay as aliases above the config.

`value` reads one setting, checked; `origin_of` (pure) and `report` say where each
came from (``hrl-tasks train --verbose``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import dask.config
import yaml
from dask.typing import no_default
from dask.utils import parse_bytes, parse_timedelta

SECTION = "hrl-tasks"
DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "hrl_tasks.yaml"


@dataclass(frozen=True)
class Setting:
    """One key of the section: its kind, and the environment variable that overrides
    the config (the engine's own, from before the section), if any."""

    name: str
    kind: str  # "route", "flag", "seconds", "seconds-or-null", "bytes"
    alias: str | None = None

    @property
    def key(self) -> str:
        return f"{SECTION}.{self.name}"

    @property
    def variable(self) -> str:
        """Dask's environment variable for this key."""
        return "DASK_" + self.key.upper().replace("-", "_").replace(".", "__")


SETTINGS = {
    s.name: s
    for s in (
        Setting("route", "route", alias="HRL_TASKS_ROUTE"),
        Setting("validate", "flag", alias="HRL_TASKS_VALIDATE"),
        Setting("send-interval", "seconds-or-null"),
        Setting("stall-warning", "seconds-or-null"),
        Setting("lost-worker-timeout", "seconds"),
        Setting("keep-from", "bytes"),
    )
}
ROUTES = ("dask", "direct")
WHAT = {
    "route": f"one of {', '.join(ROUTES)} or null",
    "flag": "true or false (an alias: 1 or 0)",
    "seconds": "a duration above 0, e.g. 10s or 0.5",
    "seconds-or-null": "a duration of 0 or more, e.g. 1ms or 60s, or null",
    "bytes": "a size of 0 or more, e.g. 100kB",
}


def parse(setting: Setting, raw, origin: str):
    """``raw`` as ``setting``'s value (seconds as a float, bytes as an int); a clear
    error naming the key, where it came from and what would be right. Pure."""
    try:
        return _parse(setting.kind, raw)
    except (TypeError, ValueError, KeyError):
        pass
    raise ValueError(f"{setting.key} is {raw!r} (from {origin}): it must be {WHAT[setting.kind]}")


def _parse(kind: str, raw):
    if kind == "route":
        if raw is None or raw in ROUTES:
            return raw
    elif kind == "flag":
        flags = {"1": True, "0": False, "true": True, "false": False}
        return raw if isinstance(raw, bool) else flags[str(raw).strip().lower()]
    elif raw is None:
        if kind == "seconds-or-null":
            return None
    elif kind == "bytes":
        size = parse_bytes(raw) if isinstance(raw, str) else raw
        if isinstance(size, int | float) and not isinstance(size, bool) and size >= 0:
            return int(size)
    elif not isinstance(raw, bool):
        seconds = float(parse_timedelta(raw, default="s"))
        if seconds > 0 or (seconds == 0 and kind == "seconds-or-null"):
            return seconds
    raise ValueError(raw)


def origin_of(
    setting: Setting,
    argument,
    environ: Mapping[str, str],
    files: list[tuple[str, dict]],
    configured,
    default,
) -> str:
    """Where ``setting``'s value comes from, as ``report`` prints it: ``argument``
    (when not ``no_default``), its alias or Dask's variable in ``environ``, the last of ``files`` (path,
    contents) holding it, ``dask.config.set`` when the config's value ``configured``
    differs from the shipped ``default``, else the default. Pure."""
    if argument is not no_default:
        return "argument"
    if setting.alias and environ.get(setting.alias):
        return setting.alias
    if setting.variable in environ:
        return setting.variable
    holders = [path for path, contents in files if _holds(contents, setting.key)]
    if holders:
        return holders[-1]
    return "default" if configured == default else "dask.config.set"


def _holds(contents: dict, key: str) -> bool:
    section, _, name = key.partition(".")
    for k, v in (contents or {}).items():
        if k.replace("_", "-") == section and isinstance(v, dict):
            return any(n.replace("_", "-") == name for n in v)
    return False


def value(name: str, argument=no_default):
    """Setting ``name``'s value: ``argument`` when given (None too: it is a value of
    the nullable settings), else its alias from the environment when set, else
    ``dask.config``'s; checked (`parse`: a bad one names where it came from)."""
    setting = SETTINGS[name]
    if argument is not no_default:
        raw = argument
    elif setting.alias and os.environ.get(setting.alias):
        raw = os.environ[setting.alias]
    else:
        raw = dask.config.get(setting.key)
    try:
        return _parse(setting.kind, raw)
    except (TypeError, ValueError, KeyError):
        return parse(setting, raw, origin(name, argument))


def validating(validate: bool | None = None) -> bool:
    """Whether a state machine checks its rules after every event (`validate.check`):
    ``validate``, or if None the ``validate`` setting (``HRL_TASKS_VALIDATE=1``, then
    ``dask.config``; worker processes read it too, for the worker's half of the task
    stream)."""
    return value("validate", no_default if validate is None else bool(validate))


def origin(name: str, argument=no_default) -> str:
    """Where setting ``name``'s value comes from now (`origin_of` on this process's
    environment, Dask's YAML files and config)."""
    setting = SETTINGS[name]
    files = [(str(p), c) for p, c in dask.config.collect_yaml(dask.config.paths, return_paths=True)]
    shipped = yaml.safe_load(DEFAULTS_FILE.read_text())[SECTION][name]
    configured = dask.config.get(setting.key)
    return origin_of(setting, argument, os.environ, files, configured, shipped)


def report(arguments: Mapping[str, object] | None = None) -> list[tuple[str, object, str]]:
    """Each setting as (key, value, where it came from), the ``arguments`` given by
    name overriding; for ``--verbose``."""
    arguments = arguments or {}
    rows = []
    for name, setting in SETTINGS.items():
        argument = arguments.get(name, no_default)
        rows.append((setting.key, value(name, argument), origin(name, argument)))
    return rows


def _load_defaults() -> None:
    """Add the shipped defaults to Dask's (a value a user set stays theirs)."""
    defaults = yaml.safe_load(DEFAULTS_FILE.read_text())
    dask.config.update_defaults(defaults)


_load_defaults()
