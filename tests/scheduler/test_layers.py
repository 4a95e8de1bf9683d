"""The engine's shape: no import cycle, and distributed's private parts behind one door."""

import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "hrl_tasks" / "scheduler"
COMPAT = "dask_compat"


def runtime_imports(path: pathlib.Path) -> set[str]:
    """The scheduler modules ``path`` imports when it runs (not under TYPE_CHECKING)."""
    return scheduler_imports(path, type_checking=False)


def scheduler_imports(path: pathlib.Path, type_checking: bool = True) -> set[str]:
    """The scheduler modules ``path`` imports, anywhere in it (in functions too, and
    under TYPE_CHECKING unless ``type_checking`` is False).

    Read as text, not with ``ast``: CPython 3.11's parser can fail with
    "AST constructor recursion depth mismatch" while other threads compile.
    """
    source = path.read_text()
    if not type_checking:
        source = re.sub(r"^if TYPE_CHECKING:\n(?:(?:[ \t]+.*)?\n)*", "", source, flags=re.M)
    found = set()
    head = r"^\s*from hrl_tasks\.scheduler(?:\.(\w+))? import "
    imports = re.findall(head + r"\(([^)]*)\)", source, flags=re.M)
    imports += re.findall(head + r"([^(\n]+)$", source, flags=re.M)
    for module, names in imports:
        listed = {n.split(" as ")[0].strip() for n in names.split(",")} - {""}
        found |= {module} if module else listed
    return found - {path.stem}


def test_the_scheduler_package_has_no_import_cycle_even_for_type_checking():
    # A TaskRef or a handle knows the engine by the protocol it asks of it, the
    # state's rules (validate.py) the state by the shape they read.
    graph = {p.stem: scheduler_imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}

    def visit(module, path):
        for dep in graph.get(module, ()):
            assert dep not in path, f"import cycle: {' -> '.join([*path, dep])}"
            visit(dep, [*path, dep])

    for module in graph:
        visit(module, [module])


def test_the_state_machine_does_no_io():
    imports = runtime_imports(PACKAGE / "state.py")
    allowed = {"events", "retry", "errors", "resources", "speculation", "stats", "status"}
    allowed |= {"kept_order"}
    assert imports <= allowed | {"story", "validate", "placement"}
    for helper in ("story", "validate", "placement"):  # pure helpers of the state machine
        assert runtime_imports(PACKAGE / f"{helper}.py") <= allowed
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
