import pytest

import hrl_tasks as hrl


@pytest.fixture(scope="module")
def engine():
    """Two worker processes with one thread each, shared by the tests of a module."""
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as eng:
        yield eng
