"""The whole package's shape: the layers CONTRIBUTING.md draws, checked from the imports.

Imports are read as text (top level and inside functions; ``TYPE_CHECKING`` blocks
aside), not with ``ast``: CPython 3.11's parser can fail with "AST constructor
recursion depth mismatch" while other threads compile. Strings and comments are
blanked first, so that an example in a docstring is not taken for an import.
"""

import io
import pathlib
import re
import subprocess
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hrl_tasks"
COMPAT = PACKAGE / "scheduler" / "dask_compat.py"

DASK_PACKAGES = ("distributed", "dask_jobqueue")
"""Imported only in ``hrl_tasks/scheduler/``."""
DASK_INTERNAL_MODULES = (
    "distributed.core",
    "distributed.deploy.local",
    "distributed.utils",
    "distributed.worker",
    "distributed.worker_state_machine",
    "distributed.threadpoolexecutor",
    "distributed.comm",
    "distributed.batched",
)
"""Modules of distributed whose names are internal, imported only in dask_compat.py."""
DASK_INTERNAL_NAMES = ("send_recv", "nprocesses_nthreads", "_worker_cvar")
"""Internal names without an underscore, or met under another module."""

STRINGS = {tokenize.STRING, tokenize.COMMENT} | {
    getattr(tokenize, name)
    for name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, name)
}
IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]+))",
    re.M,
)


def layer_order() -> list[str]:
    """The names of CONTRIBUTING.md's drawing, in order."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Layers") :]
    drawing = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    return [name for name in re.split(r"[\s→]+", drawing) if name]


def code_of(source: str) -> str:
    """``source`` with its strings and comments blanked (lines kept) and its
    ``if TYPE_CHECKING:`` blocks removed."""
    lines = source.splitlines(keepends=True)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in STRINGS:
            continue
        (row, col), (end_row, end_col) = token.start, token.end
        for r in range(row, end_row + 1):
            line = lines[r - 1]
            start = col if r == row else 0
            stop = end_col if r == end_row else len(line.rstrip("\n"))
            lines[r - 1] = line[:start] + " " * (stop - start) + line[stop:]
    code = "".join(lines)
    return re.sub(r"^if TYPE_CHECKING:\n(?:(?:[ \t]+.*)?\n)*", "", code, flags=re.M)


def imports_of(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of each import in ``path``; ``names`` empty for ``import m``."""
    found = []
    for match in IMPORT.finditer(code_of(path.read_text())):
        module, names, plain = match.groups()
        if plain is not None:
            modules = [part.split(" as ")[0].strip() for part in plain.split(",")]
            found += [(m, []) for m in modules if m]
        else:
            listed = [n.split(" as ")[0].strip() for n in names.strip("()").split(",")]
            found.append((module, [n for n in listed if n and n != "\\"]))
    return found


def module_of(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imported_modules(path: pathlib.Path) -> set[str]:
    """The hrl_tasks modules ``path`` imports (``from hrl_tasks import scheduler`` is the
    module ``hrl_tasks.scheduler``; ``from hrl_tasks import train`` the package itself)."""
    found = set()
    for module, names in imports_of(path):
        if module != "hrl_tasks" and not module.startswith("hrl_tasks."):
            continue
        submodules = {f"{module}.{name}" for name in names if is_module(f"{module}.{name}")}
        found |= submodules
        if not names or len(submodules) < len(names):
            found.add(module)
    return found


def layer_of(module: str) -> str:
    """The drawing's name for a module: its first part below hrl_tasks, or the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hrl_tasks"


def package_files() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_drawing_names_every_part_of_the_package_once():
    order = layer_order()
    assert len(order) == len(set(order)), f"a name is drawn twice: {order}"
    parts = {layer_of(module_of(path)) for path in package_files()}
    assert parts - set(order) == set(), "place these in CONTRIBUTING.md's drawing"
    assert set(order) - parts == set(), "the drawing names what the package lacks"


def test_each_layer_imports_only_the_layers_before_it():
    order = layer_order()
    breaks = []
    for path in package_files():
        mine = layer_of(module_of(path))
        for module in sorted(imported_modules(path)):
            theirs = layer_of(module)
            if order.index(theirs) > order.index(mine):
                breaks.append(f"{path.relative_to(ROOT)} ({mine}) imports {module} ({theirs})")
    assert not breaks, "imports against the layer order:\n" + "\n".join(breaks)


def test_no_module_imports_its_own_package():
    """A package's ``__init__`` imports its modules; a module importing it back is a
    cycle that only works in some import orders (and loads every sibling)."""
    breaks = []
    for path in package_files():
        parts = module_of(path).split(".")
        own = {".".join(parts[:i]) for i in range(2, len(parts))}  # hrl_tasks itself aside
        for module in imported_modules(path) & own:
            breaks.append(f"{path.relative_to(ROOT)} imports its own package {module}")
    assert not breaks, "\n".join(breaks)


def test_only_the_engine_imports_dask_distributed_and_jobqueue():
    breaks = []
    for path in package_files():
        if path.is_relative_to(PACKAGE / "scheduler"):
            continue
        for module, _ in imports_of(path):
            if module.split(".")[0] in DASK_PACKAGES:
                breaks.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not breaks, "only hrl_tasks/scheduler/ may import these:\n" + "\n".join(breaks)


def test_dask_internals_are_reached_only_in_dask_compat():
    breaks = []
    for path in package_files():
        if path == COMPAT:
            continue
        for module, names in imports_of(path):
            if module.split(".")[0] not in ("dask", *DASK_PACKAGES):
                continue
            internal = [n for n in names if n.startswith("_") or n in DASK_INTERNAL_NAMES]
            if module.startswith(DASK_INTERNAL_MODULES) or internal or "._" in module:
                breaks.append(f"{path.relative_to(ROOT)}: from {module} import {names}")
    assert not breaks, "move these into scheduler/dask_compat.py:\n" + "\n".join(breaks)


def test_each_private_access_says_why():
    """ruff selects SLF (pyproject.toml), so a private part of another library is reached
    only with ``noqa: SLF001``; each says why in a comment on its line or the two above
    (in dask_compat.py, each function's docstring says why)."""
    bare = []
    for path in package_files():
        if path == COMPAT:
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "noqa: SLF001" not in line:
                continue
            around = [line.replace("# noqa: SLF001", ""), *lines[max(0, i - 2) : i]]
            if not any("#" in text for text in around):
                bare.append(f"{path.relative_to(ROOT)}:{i + 1}: {line.strip()}")
    assert not bare, "give these a reason:\n" + "\n".join(bare)


def test_ruff_finds_no_unmarked_private_access():
    pytest.importorskip("ruff")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "SLF", "--output-format",
         "concise", str(PACKAGE)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_bench_or_example_script_takes_a_standard_library_modules_name():
    """``python bench/x.py`` puts bench/ first on sys.path: a bench/profile.py there was
    imported for the standard library's ``profile`` (by cProfile, which torch.optim's
    first use imports), and broke every torch.optim user the benches ran."""
    scripts = [*(ROOT / "bench").glob("*.py"), *(ROOT / "examples").glob("*.py")]
    assert scripts
    assert [p.name for p in scripts if p.stem in sys.stdlib_module_names] == []


def test_the_formatter_s_output_is_the_package_s_with_few_exceptions_each_said_why():
    # CONTRIBUTING.md: `# fmt: skip` only where a table would be unreadable otherwise,
    # with the reason in a comment on the line above, and at most 40 in the package.
    skips = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.rstrip().endswith("# fmt: skip"):
                above = lines[number - 1].strip() if number else ""
                skips.append((f"{path.relative_to(ROOT)}:{number + 1}", above.startswith("#")))
    assert len(skips) <= 40, len(skips)
    assert all(said for _, said in skips), [where for where, said in skips if not said]


def test_the_engine_module_is_the_api_alone():
    # The deployment forms, the stateful workers' API and what the engine tells of
    # its cluster live in modules of their own (CONTRIBUTING.md, "Working in the
    # engine"): engine.py holds the task API and stays under 600 lines.
    lines = (PACKAGE / "scheduler" / "engine.py").read_text().count("\n")
    assert lines < 600, f"hrl_tasks/scheduler/engine.py has {lines} lines"
