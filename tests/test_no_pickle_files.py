"""No module of hrl_tasks reads what it unpickles from a file.

Unpickling runs whatever code the bytes name, so the files a run or a search writes
and reads back (checkpoints, a search's state, recorded experience) are msgpack, JSON
or Parquet. Pickle is read only in the network-frame modules, from the cluster's own
processes (`NETWORK_FRAMES`), and in the one-off converter of an earlier version's
search, which the user runs on a directory they trust (`OPT_IN`).

The source is read as tokens, as tests/test_layers.py reads imports (its strings and
comments blanked), not with ``ast``: names bound by imports are followed to the module
they come from, so ``import pickle as p; p.loads(...)`` and ``from pickle import loads``
are found too.
"""

import re

import pytest

from tests.test_layers import ROOT, code_of, package_files

NETWORK_FRAMES = {
    "hrl_tasks/scheduler/wire.py",
    "hrl_tasks/scheduler/serialization.py",
    "hrl_tasks/scheduler/task_service.py",
}
OPT_IN = {"hrl_tasks/tuning/convert.py"}

PICKLE_MODULES = {"pickle", "_pickle", "cloudpickle", "dill"}
"""Modules (the last part of their dotted name) whose ``load``, ``loads`` and
``Unpickler`` unpickle."""
PICKLE_READERS = {"load", "loads", "Unpickler"}
OTHER_READERS = {"torch.load", "pandas.read_pickle", "shelve.open", "joblib.load"}
"""Functions of other modules that unpickle what they read."""

IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]+))",
    re.M,
)
DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:[ \t]*\.[ \t]*[A-Za-z_]\w*)*")


def bound_names(code: str) -> dict[str, str]:
    """What each name bound by an import in ``code`` stands for, as a dotted path:
    ``import numpy as np`` binds ``np`` to ``numpy``, ``from pickle import loads``
    binds ``loads`` to ``pickle.loads``, ``import a.b`` binds ``a`` to ``a``."""
    names = {}
    for match in IMPORT.finditer(code):
        module, imported, plain = match.groups()
        for part in (plain or imported).strip("()").split(","):
            words = part.replace("\\", " ").split()
            if not words:
                continue
            name, alias = words[0], words[-1] if len(words) == 3 and words[1] == "as" else None
            if plain is not None:
                names[alias or name.split(".")[0]] = name if alias else name.split(".")[0]
            elif not module.startswith("."):
                names[alias or name] = f"{module}.{name}"
    return names


def unpickling(source: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of each place in ``source`` that names a function that
    unpickles (a call, a reference, or an import of it)."""
    code = code_of(source)
    names = bound_names(code)
    found = []
    for match in DOTTED.finditer(code):
        parts = [p.strip() for p in match.group().split(".")]
        if parts[0] in ("import", "from"):
            continue
        dotted = ".".join([names.get(parts[0], parts[0]), *parts[1:]])
        for end in range(2, dotted.count(".") + 2):  # pickle.loads in pickle.loads.x too
            if reads_pickle(".".join(dotted.split(".")[:end])):
                found.append((code.count("\n", 0, match.start()) + 1, dotted))
                break
    for match in re.finditer(r"allow_pickle[ \t]*=[ \t]*True", code):
        found.append((code.count("\n", 0, match.start()) + 1, "allow_pickle=True"))
    return sorted(set(found + imported_readers(code)))


def imported_readers(code: str) -> list[tuple[int, str]]:
    """``from pickle import loads`` and its kind: the import of a function that unpickles."""
    found = []
    for match in IMPORT.finditer(code):
        module, imported, _ = match.groups()
        if module is None:
            continue
        for part in imported.strip("()").split(","):
            words = part.replace("\\", " ").split()
            if words and reads_pickle(f"{module}.{words[0]}"):
                found.append((code.count("\n", 0, match.start()) + 1, f"{module}.{words[0]}"))
    return found


def reads_pickle(dotted: str) -> bool:
    """Whether the function at ``dotted`` (e.g. ``distributed.protocol.pickle.loads``)
    unpickles."""
    module, _, name = dotted.rpartition(".")
    if name in PICKLE_READERS and module.rpartition(".")[2] in PICKLE_MODULES:
        return True
    return dotted in OTHER_READERS


def test_no_module_but_the_network_frames_and_the_converter_unpickles():
    found = {}
    for path in package_files():
        name = path.relative_to(ROOT).as_posix()
        places = unpickling(path.read_text())
        if places:
            found[name] = places
    allowed = NETWORK_FRAMES | OPT_IN
    breaks = [
        f"{name}:{line}: {what}"
        for name, places in found.items()
        if name not in allowed
        for line, what in places
    ]
    message = "these unpickle; write files with hrl_tasks.data.encode or as JSON:\n"
    assert not breaks, message + "\n".join(breaks)
    assert set(found) >= OPT_IN  # the scan sees the unpickling it allows, too


@pytest.mark.parametrize(
    "source",
    [
        "import pickle\nstate = pickle.loads(data)\n",
        "import pickle as p\nwith open(path, 'rb') as f:\n    p.load(f)\n",
        "from pickle import loads\n",
        "from pickle import (\n    dumps,\n    loads as read,\n)\nread(data)\n",
        "import cloudpickle\ncloudpickle.loads(data)\n",
        "from distributed.protocol.pickle import dumps, loads\n",
        "import distributed.protocol.pickle\ndistributed.protocol.pickle.loads(b)\n",
        "import pickle\nreader = pickle.Unpickler(f)\n",
        "def read(path):\n    import torch\n    return torch.load(path)\n",
        "import numpy as np\nnp.load(path, allow_pickle=True)\n",
        "import pickle\nread = pickle . loads\n",
    ],
)
def test_the_scan_finds_each_way_to_unpickle(source):
    assert unpickling(source)


@pytest.mark.parametrize(
    "source",
    [
        "import pickle\ndata = pickle.dumps(state)\n",
        '"""Never pickle.loads(a file)."""\n',
        "x = 1  # not pickle.loads(x)\n",
        "import json\njson.loads(text)\n",
        "from hrl_tasks.data import decode\ndecode(payload)\n",
        "import numpy as np\nnp.load(path)\n",
        "loads = json.loads\nloads(text)\n",
    ],
)
def test_the_scan_passes_what_does_not_unpickle(source):
    assert unpickling(source) == []
