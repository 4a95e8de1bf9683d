"""A run's output directory: one run's files, never overwritten unasked.

A directory holds a run when it has any entry but those a batch runner keeps
there for the run itself (`RUNNER_ENTRIES`: its scheduler file, the workers'
scratch space and logs). A new run into such a directory is refused before any
cluster starts, unless the user continues that run (``--resume``) or asks for
its files to be moved aside (``--force``: the directory is renamed
``<out>.old-<time>``, never deleted). With no directory named, a run takes the
first free of ``runs/NAME``, ``runs/NAME-2``, ... (as Stable-Baselines3's
``PPO_2`` and Lightning's ``version_1`` do), so the same command run twice
gives two runs.

The decisions are plain functions of the directory's listing and the clock;
`claim` carries them out (a rename, a ``mkdir``).

A run's files are written atomically (`write_atomically`): to a name of their own
beside the file, flushed to disk, renamed over it, and the directory flushed, so
that a crash leaves the old file or the new one; a crashed write's temp file is
removed when a run starts in its directory (`remove_stale_writes`).
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
import uuid
from pathlib import Path

from hrl_tasks.errors import ConfigError

RUNNER_ENTRIES = ("scheduler-*.json", "dask-scratch", "worker-logs", ".hrl-network-*.json*")
"""What ``--runner`` and ``--cluster`` put in the run's directory for the run itself."""
SHOWN = 4  # entries named in a refusal
STALE_WRITE = re.compile(r"\..+\.(tmp-\d+|\d+-[0-9a-f]+\.tmp)")
"""The temp file of a `write_atomically` (``.NAME.PID-RANDOM.tmp``; ``.NAME.tmp-PID``
from earlier versions) left behind by a process that died mid-write."""


class RunDirError(ConfigError):
    """An output directory that holds another run's files."""


def run_entries(out: Path) -> list[str]:
    """The names in ``out`` that belong to a run (all but `RUNNER_ENTRIES`), sorted;
    none if ``out`` does not exist.

    Raises:
        RunDirError: if ``out`` exists and is not a directory.
    """
    if not out.exists():
        return []
    if not out.is_dir():
        raise RunDirError(f"{out} is a file, not a directory: name a directory for the run")
    return sorted(
        entry.name
        for entry in out.iterdir()
        if not any(fnmatch.fnmatch(entry.name, pattern) for pattern in RUNNER_ENTRIES)
    )


def numbered(base: Path, n: int) -> Path:
    """``base`` for the first run, ``base-2`` for the second, ... Pure."""
    return base if n == 1 else base.with_name(f"{base.name}-{n}")


def aside_name(out: Path, now: float, taken) -> Path:
    """Where ``--force`` moves ``out``: ``<out>.old-<local time>``, then ``-2``, ``-3``
    if ``taken(path)`` says that one exists. Pure but for ``taken``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = out.with_name(f"{out.name}.old-{stamp}")
    n = 1
    while taken(numbered(base, n)):
        n += 1
    return numbered(base, n)


def refusal(out: Path, entries: list[str], resume_hint: str, force_hint: str) -> str:
    """The one line that refuses a run into ``out``, which holds ``entries``. Pure."""
    shown = ", ".join(entries[:SHOWN])
    if len(entries) > SHOWN:
        shown += f" and {len(entries) - SHOWN} more"
    return (
        f"{out} holds another run's files ({shown}); a new run would overwrite them. "
        f"Continue that run with {resume_hint}, name another directory, or move its "
        f"files aside to {out}.old-<time> with {force_hint}"
    )


def claim(
    out: Path | None,
    default: Path,
    *,
    force: bool = False,
    resume_hint: str = "--resume",
    force_hint: str | None = None,
) -> tuple[Path, Path | None]:
    """The directory a new run writes to, created; nothing of another run is lost.

    Args:
        out: the directory the user named, or None for the first free of ``default``,
            ``default-2``, ...
        default: the run's default directory (``runs/ppo-CartPole-v1``).
        force: move the files of another run in ``out`` aside instead of refusing.
        resume_hint, force_hint: how the user asks to resume or to force, for the
            refusal: the command line's options, or Python's keywords (``force_hint``
            defaults to ``--force`` beside ``--resume...`` hints, else ``force=True``).

    Returns:
        The run's directory, and where another run's files were moved (or None).

    Raises:
        RunDirError: if ``out`` holds another run's files and ``force`` is not set, or
            ``force`` would move the working directory (or one above it).
    """
    force_hint = force_hint or ("--force" if resume_hint.startswith("--") else "force=True")
    if out is None:
        return first_free(default), None
    entries = run_entries(out)
    if not entries:
        out.mkdir(parents=True, exist_ok=True)
        return out, None
    if not force:
        raise RunDirError(refusal(out, entries, resume_hint, force_hint))
    here = Path.cwd().resolve()
    if out.resolve() in (here, *here.parents):
        raise RunDirError(
            f"{force_hint} would move {out}, the working directory or one above it: "
            "name the run's own directory"
        )
    aside = aside_name(out, time.time(), Path.exists)
    os.replace(out, aside)
    out.mkdir(parents=True)
    return out, aside


def first_free(default: Path) -> Path:
    """The first of ``default``, ``default-2``, ... that holds no run, created (a new
    directory is made with ``mkdir``, so two runs starting together take two)."""
    n = 1
    while True:
        candidate = numbered(default, n)
        if not candidate.exists():
            try:
                candidate.mkdir(parents=True)
                return candidate
            except FileExistsError:  # another run took it just now
                pass
        elif candidate.is_dir() and not run_entries(candidate):
            return candidate
        n += 1


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new one:
    written to a name of its own in the same directory, flushed to disk, renamed over
    ``path``, and the directory's entry flushed too."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Flush ``directory``'s entries (a rename in it) to disk; a no-op where a directory
    cannot be opened or flushed (Windows, some network file systems)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_writes(directory: Path) -> list[Path]:
    """Remove the temp files of writes that never finished (their process died) from
    ``directory``; call it before a run starts writing there.

    Returns:
        The files removed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = [entry for entry in directory.iterdir() if STALE_WRITE.fullmatch(entry.name)]
    for entry in stale:
        entry.unlink(missing_ok=True)
    return stale
