"""Checkpoint files: any truncation or corruption is named, never loaded (no cluster)."""

import os
from datetime import timedelta

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.algorithms.checkpoint import (
    FORMAT,
    CheckpointError,
    latest_checkpoint,
    prune_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from hrl_tasks.data import encode
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.run_dir import remove_stale_writes


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOPolicyConfig(seed=0))
    state = {"format": FORMAT, "algorithm": "ppo", "policy": policy.get_state(), "iteration": 7}
    path = write_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint-000007.hrl", state)
    return path, path.read_bytes()


def test_a_checkpoint_reads_back_as_written(saved):
    path, _ = saved
    state = read_checkpoint(path)
    assert state["iteration"] == 7 and state["algorithm"] == "ppo"
    assert not list(path.parent.glob(".*tmp*"))  # the temporary file was renamed


damage = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("flip"), st.floats(0.0, 0.999), st.integers(1, 255)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=16)),
)


@settings(max_examples=200, deadline=timedelta(seconds=1), database=None)
@given(damage)
def test_any_damage_is_named_and_loads_nothing(tmp_path_factory, saved, change):
    _, data = saved
    kind = change[0]
    if kind == "truncate":
        damaged = data[: int(len(data) * change[1])]
    elif kind == "flip":
        i = int(len(data) * change[1])
        damaged = data[:i] + bytes([data[i] ^ change[2]]) + data[i + 1 :]
    else:
        damaged = data + change[1]
    path = tmp_path_factory.mktemp("damaged") / "checkpoint-000007.hrl"
    path.write_bytes(damaged)
    with pytest.raises(CheckpointError, match="checkpoint-000007.hrl") as info:
        read_checkpoint(path)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == damaged  # left as it was, for the user to look at


def test_a_file_without_the_digest_header_still_reads(tmp_path):
    path = tmp_path / "old.hrl"
    path.write_bytes(encode({"format": FORMAT, "algorithm": "ppo", "iteration": 1}))
    assert read_checkpoint(path)["iteration"] == 1


def test_pruning_keeps_the_newest_and_only_the_runs_own_files(tmp_path):
    for iteration in range(1, 6):
        path = write_checkpoint(tmp_path / f"checkpoint-{iteration:06d}.hrl", {"i": iteration})
        os.utime(path, (iteration, iteration))  # modification times in write order
    mine = write_checkpoint(tmp_path / "best.hrl", {"i": 0})
    os.utime(mine, (0, 0))
    deleted = prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in deleted] == [f"checkpoint-00000{i}.hrl" for i in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.hrl",
        "checkpoint-000004.hrl",
        "checkpoint-000005.hrl",
    ]
    assert latest_checkpoint(tmp_path).name == "checkpoint-000005.hrl"
    assert prune_checkpoints(tmp_path, keep=0) == [] and len(list(tmp_path.iterdir())) == 3


def test_the_last_checkpoint_is_the_highest_iteration_whatever_the_times(tmp_path):
    """A run directory copied without its times (or a clock that went back) still resumes
    from, and prunes to, the iterations in the names; other ``.hrl`` files never count."""
    for iteration, mtime in ((12, 100), (5, 300), (10, 200)):
        path = write_checkpoint(tmp_path / f"checkpoint-{iteration:06d}.hrl", {"i": iteration})
        os.utime(path, (mtime, mtime))
    newest = write_checkpoint(tmp_path / "a2c.hrl", {"i": -1})
    os.utime(newest, (400, 400))
    assert latest_checkpoint(tmp_path).name == "checkpoint-000012.hrl"
    assert [p.name for p in prune_checkpoints(tmp_path, keep=2)] == ["checkpoint-000005.hrl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a2c.hrl",
        "checkpoint-000010.hrl",
        "checkpoint-000012.hrl",
    ]


def test_a_directory_without_run_checkpoints_names_the_files_it_has(tmp_path):
    only = write_checkpoint(tmp_path / "best.hrl", {"i": 0})
    assert latest_checkpoint(tmp_path) == only  # one file: no doubt which
    with pytest.raises(CheckpointError, match="no checkpoint-NNNNNN"):
        latest_checkpoint(tmp_path, run_only=True)  # a run resumes from its own only
    write_checkpoint(tmp_path / "last.hrl", {"i": 1})
    with pytest.raises(
        CheckpointError, match=r"no checkpoint-NNNNNN\.hrl in .*best\.hrl, last\.hrl"
    ):
        latest_checkpoint(tmp_path)


def test_temp_files_of_a_crashed_write_are_removed_at_start(tmp_path):
    kept = write_checkpoint(tmp_path / "checkpoint-000001.hrl", {"i": 1})
    crashed = tmp_path / ".checkpoint-000002.hrl.tmp-4242"  # as earlier versions named it
    crashed.write_bytes(b"half a checkpoint")
    also = tmp_path / ".search.json.4242-0123456789ab.tmp"
    also.write_bytes(b"half a state")
    assert sorted(remove_stale_writes(tmp_path)) == sorted([crashed, also])
    assert sorted(tmp_path.iterdir()) == [kept]
    assert remove_stale_writes(tmp_path / "missing") == []
