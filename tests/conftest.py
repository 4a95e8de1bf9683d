# Imported here, at collection: hypothesis's pytest plugin imports it at the end of a
# run otherwise, and CPython 3.11.7 fails to compile it ("AST constructor recursion
# depth mismatch") while threads of a closed cluster are still compiling.
import os

import hypothesis  # noqa: F401
import pytest

import hrl_tasks as hrl


@pytest.fixture(scope="module")
def engine():
    """Two worker processes with one thread each, shared by the tests of a module."""
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as eng:
        yield eng


def require_real_part(name: str, missing: str | None) -> None:
    """Go on if ``missing`` is None; else stop the test, saying what is missing.

    A real part (SLURM, the Dask Gateway, MPI) is installed and started by CI
    (`.ci/run`, ``CI=true``): there its absence fails the test, so that CI runs what
    it claims to. Elsewhere (a laptop without SLURM) the test skips.
    """
    if missing is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs {name} (.ci/run installs and starts it), but {missing}")
    pytest.skip(f"{name}: {missing}")
