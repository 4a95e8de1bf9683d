"""One class per config name in the package; the policies' old names still resolve."""

import ast
import collections
import gc
import importlib
from pathlib import Path

import pytest

import hrl_tasks
from hrl_tasks.policies.configs import OLD_NAMES

PACKAGE = Path(hrl_tasks.__file__).parent


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, built with the garbage collector held.

    Python 3.11's tree builder is not reentrant: a collection during the build that
    runs a failing finalizer (another test's leftover object) formats its traceback,
    whose carets parse source again, and the outer parse fails with "AST constructor
    recursion depth mismatch"."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), filename=str(path))
    finally:
        if was_enabled:
            gc.enable()


def test_every_config_class_name_is_defined_once_in_the_package():
    where = collections.defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice and len(where) > 20, twice


@pytest.mark.parametrize("old, new", sorted(OLD_NAMES.items()))
def test_a_policy_config_s_old_name_warns_and_is_the_renamed_class(old, new):
    configs = importlib.import_module("hrl_tasks.policies.configs")
    module = importlib.import_module(f"hrl_tasks.policies.{old.removesuffix('Config').lower()}")
    for place in (configs, module, importlib.import_module("hrl_tasks.policies")):
        with pytest.warns(DeprecationWarning, match=f"{old} is now .*{new}"):
            assert getattr(place, old) is getattr(configs, new)


def test_a_name_that_never_was_is_still_an_attribute_error():
    import hrl_tasks.policies as policies

    with pytest.raises(AttributeError, match="no attribute 'PPOConfg'"):
        _ = policies.PPOConfg
