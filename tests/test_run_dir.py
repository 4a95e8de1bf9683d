"""A run's output directory: refused when it holds another run, moved aside only when
asked, the first free default taken otherwise."""

import os
import re

import pytest

from hrl_tasks.run_dir import RunDirError, aside_name, claim, first_free, run_entries


def a_run(path):
    """A directory holding a finished run's files; returns their bytes by name."""
    (path / "checkpoints").mkdir(parents=True)
    (path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    (path / "checkpoints" / "checkpoint-000001.hrl").write_bytes(b"weights")
    return contents(path)


def contents(path):
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_the_runners_own_files_are_not_a_run(tmp_path):
    (tmp_path / "scheduler-17-0.json").write_text("{}")
    (tmp_path / "dask-scratch").mkdir()
    (tmp_path / "worker-logs").mkdir()
    assert run_entries(tmp_path) == []
    (tmp_path / "metrics.jsonl").write_text("")
    assert run_entries(tmp_path) == ["metrics.jsonl"]
    assert run_entries(tmp_path / "missing") == []


def test_a_used_directory_is_refused_and_left_byte_for_byte(tmp_path):
    out = tmp_path / "runA"
    before = a_run(out)
    with pytest.raises(RunDirError) as info:
        claim(out, tmp_path / "unused")
    message = str(info.value)
    assert str(out) in message and "--resume" in message and "--force" in message
    assert "checkpoints, metrics.jsonl" in message
    assert contents(out) == before
    with pytest.raises(RunDirError, match="resume=True.*force=True"):
        claim(out, out, resume_hint="resume=True")


def test_force_moves_the_old_run_aside_and_deletes_nothing(tmp_path):
    out = tmp_path / "runA"
    before = a_run(out)
    taken, aside = claim(out, out, force=True)
    assert taken == out and list(out.iterdir()) == []
    assert re.fullmatch(r"runA\.old-\d{8}-\d{6}", aside.name)
    assert contents(aside) == before
    a_run(out)
    _, second = claim(out, out, force=True)  # within the same second: a name of its own
    assert second != aside and contents(aside) == before


def test_force_never_moves_the_working_directory(tmp_path, monkeypatch):
    a_run(tmp_path / "here")
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(RunDirError, match="working directory"):
        claim(tmp_path / "here", tmp_path, force=True)
    with pytest.raises(RunDirError, match="working directory"):
        claim(tmp_path, tmp_path, force=True)
    assert (tmp_path / "here" / "metrics.jsonl").exists()


def test_the_default_is_the_first_free_numbered_directory(tmp_path):
    base = tmp_path / "runs" / "ppo-CartPole-v1"
    assert claim(None, base) == (base, None) and base.is_dir()
    assert first_free(base) == base  # created but still empty: still free
    a_run(base)
    second = first_free(base)
    assert second.name == "ppo-CartPole-v1-2" and second.is_dir()
    a_run(second)
    (tmp_path / "runs" / "ppo-CartPole-v1-3").write_text("a file, not a run directory")
    assert first_free(base).name == "ppo-CartPole-v1-4"


def test_a_file_named_as_the_run_directory_is_refused(tmp_path):
    (tmp_path / "out").write_text("notes")
    with pytest.raises(RunDirError, match="is a file"):
        claim(tmp_path / "out", tmp_path / "out")


def test_aside_names_count_up_when_taken(tmp_path):
    now = 1_700_000_000.0
    first = aside_name(tmp_path / "run", now, lambda p: False)
    taken = {first, first.with_name(first.name + "-2")}
    assert aside_name(tmp_path / "run", now, taken.__contains__).name == first.name + "-3"
    assert os.path.dirname(first) == str(tmp_path)
