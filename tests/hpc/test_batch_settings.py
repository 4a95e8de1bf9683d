"""What batch workers declare and what connect compares: pure, no cluster."""

import pytest

from hrl_tasks.scheduler.clusters import (
    allocator_exports,
    batch_processes,
    probe_address,
    version_mismatches,
    without_resources,
)


def test_a_users_own_resources_are_taken_out_in_both_spellings():
    args = ["--lifetime", "55m", "--resources", "GPU=1,x=2", "--resources=CPU=3"]
    assert without_resources(args) == (["--lifetime", "55m"], {"GPU": 1, "x": 2, "CPU": 3})
    assert without_resources(["--nthreads", "2"]) == (["--nthreads", "2"], {})


@pytest.mark.parametrize("cores, options, processes", [
    (1, {}, 1), (4, {}, 4), (8, {}, 4), (9, {}, 3), (8, {"processes": 1}, 1),
])  # fmt: skip
def test_jobs_split_into_processes_as_dask_jobqueue_splits_them(cores, options, processes):
    assert batch_processes("slurm", cores, options) == processes


def test_versions_differ_by_hrl_tasks_version_or_by_major_version_of_the_others():
    mine = {"hrl_tasks": "0.1.0", "torch": "2.13.0", "numpy": "2.1.0", "gymnasium": "1.2.0"}
    same_majors = {"hrl_tasks": "0.1.0", "torch": "2.4.1", "numpy": "2.3.0", "gymnasium": "1.0.0"}
    assert version_mismatches(mine, same_majors) == []
    found = version_mismatches(mine, {**same_majors, "hrl_tasks": "0.2.0", "numpy": "1.26.4",
                                      "gymnasium": None})  # fmt: skip
    assert found == ["hrl_tasks 0.2.0 (needs 0.1.0)", "numpy 1.26.4 (needs 2.x, 2.1.0 here)",
                     "gymnasium not installed (needs 1.x, 1.2.0 here)"]  # fmt: skip


@pytest.mark.parametrize("address, says", [
    ("tcp://localhost", "is not a scheduler address"),
    ("tcp://no-such-host.invalid:8786", "is unknown here"),
])  # fmt: skip
def test_bad_addresses_are_named_at_once(address, says):
    with pytest.raises(OSError, match=says):
        probe_address(address, timeout=2)


def test_the_drivers_allocator_settings_are_exported_to_worker_jobs_quoted():
    environ = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_ARENA_MAX": "2 x", "HOME": "/root"}
    assert allocator_exports(environ) == [
        "export MALLOC_ARENA_MAX='2 x'",
        "export MALLOC_MMAP_THRESHOLD_=65536",
    ]
