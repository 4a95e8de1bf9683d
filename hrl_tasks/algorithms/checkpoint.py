"""Checkpoint files: written atomically, checked with a digest when read.

A file is ``MAGIC``, the SHA-256 digest of the payload, then the payload (the
state encoded by `hrl_tasks.data.encode`). A truncated or corrupted file fails
the digest and is named in a `CheckpointError`; nothing is loaded from it.
Files without the header (written before it existed) are read without the check.

A run's checkpoints are ``checkpoint-NNNNNN.hrl``, NNNNNN its iteration: only
these count when a run resumes or prunes, ordered by the iteration in the name
(not by modification time, which a copy may not keep). A write is atomic
(`hrl_tasks.run_dir.write_atomically`): a crash leaves the old file or the new one.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from hrl_tasks.data import DecodeError, decode, encode
from hrl_tasks.run_dir import write_atomically

CHECKPOINT_SUFFIX = ".hrl"
FORMAT = "hrl_tasks.checkpoint/1"
MAGIC = b"HRLCKPT\x01"
DIGEST_BYTES = 32
RUN_CHECKPOINT = re.compile(r"checkpoint-(\d+)\.hrl")
"""A run's checkpoint file: ``checkpoint-<iteration>.hrl``, the iteration zero-padded."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit this algorithm."""


def write_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (a crash mid-write leaves the old file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = encode(state)
    write_atomically(path, MAGIC + hashlib.sha256(payload).digest() + payload)
    return path


def run_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The run's checkpoints in ``directory`` (``checkpoint-NNNNNN.hrl``), by iteration."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [
        (int(match.group(1)), entry)
        for entry in directory.iterdir()
        if (match := RUN_CHECKPOINT.fullmatch(entry.name))
    ]
    return [entry for _, entry in sorted(found)]


def latest_checkpoint(path: str | os.PathLike, run_only: bool = False) -> Path:
    """``path`` if it is a file, else the run's checkpoint of the highest iteration in
    the directory (or, if it holds none and not ``run_only``, its only ``.hrl`` file:
    a directory given to `hrl_tasks.load`; a run resumes from its own checkpoints
    only).

    Raises:
        CheckpointError: if ``path`` does not exist, or is a directory holding no
            ``checkpoint-NNNNNN.hrl`` (and, unless ``run_only``, not exactly one other
            ``.hrl`` file).
    """
    path = Path(path)
    if path.is_dir():
        found = run_checkpoints(path)
        if found:
            return found[-1]
        others = sorted(path.glob(f"*{CHECKPOINT_SUFFIX}"))
        if len(others) == 1 and not run_only:  # one checkpoint of another name: that one
            return others[0]
        named = f"; name one of {', '.join(p.name for p in others)}" if others else ""
        raise CheckpointError(f"no checkpoint-NNNNNN{CHECKPOINT_SUFFIX} in {path}{named}")
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    return path


def prune_checkpoints(directory: str | os.PathLike, keep: int) -> list[Path]:
    """Delete all but the ``keep`` checkpoints of the highest iterations among the run's
    (``checkpoint-NNNNNN.hrl``) in ``directory``; other files stay. ``keep=0`` keeps all.

    Returns:
        The deleted files, lowest iteration first.
    """
    if keep <= 0:
        return []
    stale = run_checkpoints(directory)[:-keep]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Decode a checkpoint file (or the newest in a directory), saying clearly when it
    is not one.

    Raises:
        CheckpointError: naming the file, if it is missing, truncated, corrupted or
            not a checkpoint.
    """
    path = latest_checkpoint(path)
    data = path.read_bytes()
    damaged = (
        f"{path} is truncated or corrupted (its digest does not match); restore an "
        "earlier checkpoint"
    )
    if data.startswith(MAGIC):
        digest, payload = (
            data[len(MAGIC) : len(MAGIC) + DIGEST_BYTES],
            data[len(MAGIC) + DIGEST_BYTES :],
        )
        if hashlib.sha256(payload).digest() != digest:
            raise CheckpointError(damaged)
    else:
        payload = data
    try:
        state = decode(payload)
    except DecodeError as exc:
        raise CheckpointError(
            f"{path} is not a readable hrl_tasks checkpoint ({exc}); it may be truncated "
            "or corrupted: restore an earlier one"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an hrl_tasks checkpoint")
    return state
