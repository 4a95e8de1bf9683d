"""Checkpoint files: written atomically, checked with a digest when read.

A file is ``MAGIC``, the SHA-256 digest of the payload, then the payload (the
state encoded by `hrl_tasks.data.encode`). A truncated or corrupted file fails
the digest and is named in a `CheckpointError`; nothing is loaded from it.
Files without the header (written before it existed) are read without the check.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from hrl_tasks.data import DecodeError, decode, encode

CHECKPOINT_SUFFIX = ".hrl"
FORMAT = "hrl_tasks.checkpoint/1"
MAGIC = b"HRLCKPT\x01"
DIGEST_BYTES = 32


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit this algorithm."""


def write_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (a crash mid-write leaves the old file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = encode(state)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as f:
        f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def latest_checkpoint(path: str | os.PathLike) -> Path:
    """``path`` if it is a file, else the newest checkpoint in the directory."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob(f"*{CHECKPOINT_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise CheckpointError(f"no *{CHECKPOINT_SUFFIX} checkpoint in {path}")
        return found[-1]
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    return path


def prune_checkpoints(
    directory: str | os.PathLike, keep: int, pattern: str = "checkpoint-*"
) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints matching ``pattern`` in ``directory``
    (newest by modification time, the order `latest_checkpoint` uses); ``keep=0`` keeps all.

    Returns:
        The deleted files, oldest first.
    """
    if keep <= 0:
        return []
    found = sorted(
        Path(directory).glob(f"{pattern}{CHECKPOINT_SUFFIX}"), key=lambda p: p.stat().st_mtime
    )
    stale = found[:-keep]
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
