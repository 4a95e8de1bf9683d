# Imported here, at collection: hypothesis's pytest plugin imports it at the end of a
# run otherwise, and CPython 3.11.7 fails to compile it ("AST constructor recursion
# depth mismatch") while threads of a closed cluster are still compiling.
import hypothesis  # noqa: F401
import pytest

import hrl_tasks as hrl


@pytest.fixture(scope="module")
def engine():
    """Two worker processes with one thread each, shared by the tests of a module."""
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as eng:
        yield eng
