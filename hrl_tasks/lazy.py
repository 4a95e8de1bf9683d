"""A package's names that load from their modules on first use (PEP 562).

A package that re-exports from modules which import torch or distributed would make
every import of it pay for them; with `lazy_names` it pays only for what is used, so
that, say, an algorithm's config is read without importing its plan, or a rollout
process acting in numpy never imports torch::

    __getattr__, __dir__ = lazy_names(__name__, {"plan": ("PPO",)})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(
    package: str, modules: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` (call it from the package's own
    ``__init__``): each name in ``modules[m]`` is the attribute of the same name of
    the module ``package.m``, imported the first time it is asked for and then kept in
    the package.
    """
    where = {name: module for module, names in modules.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
