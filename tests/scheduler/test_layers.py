"""The engine's shape: no import cycle, and distributed's private parts behind one door."""

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "hrl_tasks" / "scheduler"
COMPAT = "dask_compat"


def runtime_imports(path: pathlib.Path) -> set[str]:
    """The scheduler modules ``path`` imports when it runs (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):  # drop `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "hrl_tasks.scheduler"
        ):
            parts = node.module.split(".")
            found |= {parts[2]} if len(parts) > 2 else {a.name for a in node.names}
    return found - {path.stem}


def test_the_scheduler_package_has_no_import_cycle():
    graph = {p.stem: runtime_imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}

    def visit(module, path):
        for dep in graph.get(module, ()):
            assert dep not in path, f"import cycle: {' -> '.join([*path, dep])}"
            visit(dep, [*path, dep])

    for module in graph:
        visit(module, [module])


def test_the_state_machine_does_no_io():
    imports = runtime_imports(PACKAGE / "state.py")
    assert imports <= {"events", "retry", "errors", "resources", "speculation", "stats"}
    source = (PACKAGE / "state.py").read_text()
    assert not re.search(r"^\s*(import|from) (distributed|dask|threading|asyncio)", source, re.M)


def test_private_parts_of_distributed_are_used_in_one_module():
    private_import = re.compile(r"from distributed[\w.]* import .*\b_\w+")
    private_attribute = re.compile(r"(?<!self)\._[a-z]\w*")  # an own private part is fine
    for path in PACKAGE.glob("*.py"):
        if path.stem == COMPAT:
            continue
        source = path.read_text()
        assert not private_import.search(source), f"{path.name} imports a private name"
        assert "SLF001" not in source, f"{path.name} silences a private access"
        for line in source.splitlines():
            if "distributed" in line or "client." in line or "worker." in line:
                assert not private_attribute.search(line.split("#")[0]), f"{path.name}: {line}"
