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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
ROLLOUT_MMAP_THRESHOLD = 16 * 1024
ENV_VARIABLE = "MALLOC_MMAP_THRESHOLD_"  # glibc's own; when set, it is left alone


def map_blocks_from(size: int = ROLLOUT_MMAP_THRESHOLD) -> bool:
    """Have glibc map blocks of ``size`` bytes and more on their own in this process
    rather than grow the heap for them.

    Returns whether it did: not where the C library is not glibc (``mallopt`` is
    missing), nor where ``MALLOC_MMAP_THRESHOLD_`` is set in the environment (the
    user's own choice, which glibc has applied already).
    """
    if os.environ.get(ENV_VARIABLE):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, int(size)))
