"""glibc's allocator in rollout worker processes: mid-sized buffers mapped on their own.

A rollout worker answers sample calls at a high rate, and every message it reads
or writes allocates and frees buffers of 16-256 KiB: Tornado reads the socket
into a fresh 64 KiB buffer, msgpack packs into a 256 KiB one, frames (weights,
batches) arrive in buffers of their own size. glibc serves blocks under its mmap
threshold (128 KiB in Dask's workers) from the heap, where these interleave with
longer-lived ones and the heap grows: IMPALA's workers grew 26 MB per 10
minutes (docs/benchmarks.md, memory soak). A block at or above the threshold that
the heap's free space cannot hold is mapped on its own instead of growing the
heap, and unmapped when freed; a rollout worker's own arrays (a few envs'
observations, a small policy's activations) stay below it.

glibc also gives a thread that allocates while others do an arena of its own, up
to 8 per core, kept for the process's life. A worker process where each trial of
a search builds and drops an algorithm starts and ends hundreds of threads; Python
allocates under its lock anyway, so such a process keeps two arenas, which bounds
what its threads can add (the step the search's soak still shows in its workers is
not this: docs/benchmarks.md).

A learner process is the opposite case: each update allocates and frees the same
tensors of 100 KiB to a few MiB (activations, gradients). Dask's nanny starts
workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes glibc's mmap
threshold at 128 KiB, so that each such tensor is mapped, faulted in page by page,
and unmapped again, every update: SAC's update took 30 ms in a Dask worker against
14 ms with both thresholds at 64 MiB (docs/benchmarks.md, learner group).
`keep_heap_for_learning` raises them in a learner's process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters
ROLLOUT_MMAP_THRESHOLD = 16 * 1024
ENV_VARIABLE = "MALLOC_MMAP_THRESHOLD_"  # glibc's own; when set, it is left alone
ROLLOUT_ARENAS = 2
ARENA_VARIABLE = "MALLOC_ARENA_MAX"  # likewise
LEARNER_THRESHOLD = 64 * 1024 * 1024


def map_blocks_from(size: int = ROLLOUT_MMAP_THRESHOLD) -> bool:
    """Have glibc map blocks of ``size`` bytes and more on their own in this process
    rather than grow the heap for them.

    Returns whether it did: not where the C library is not glibc (``mallopt`` is
    missing), nor where ``MALLOC_MMAP_THRESHOLD_`` is set in the environment (the
    user's own choice, which glibc has applied already).
    """
    return _mallopt(M_MMAP_THRESHOLD, size, ENV_VARIABLE)


def keep_heap_for_learning(size: int = LEARNER_THRESHOLD) -> bool:
    """Have glibc serve blocks under ``size`` bytes from the heap and keep up to ``size``
    bytes of free heap instead of returning it (a learner's tensors, reused every
    update; see the module). Returns whether it did, as `map_blocks_from`."""
    mapped = _mallopt(M_MMAP_THRESHOLD, size, ENV_VARIABLE)
    kept = _mallopt(M_TRIM_THRESHOLD, size, None)  # Dask's nanny sets the variable itself
    return mapped and kept


def limit_arenas(count: int = ROLLOUT_ARENAS) -> bool:
    """Have glibc keep at most ``count`` malloc arenas in this process (those it has
    already stay); threads beyond share them. Returns whether it did, as
    `map_blocks_from` (``MALLOC_ARENA_MAX`` in the environment is left alone)."""
    return _mallopt(M_ARENA_MAX, count, ARENA_VARIABLE)


def _mallopt(parameter: int, value: int, env_variable: str | None) -> bool:
    if env_variable is not None and os.environ.get(env_variable):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(parameter, int(value)))
