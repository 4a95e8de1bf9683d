"""The server that the embedded cluster's worker processes are forked from.

A spawned worker process imports distributed and the rollout code itself, about
half a second of CPU each; forked from a server that imported them once, it
starts at once. Kept free of heavy imports, so that the command line can start
the server before it imports torch: the server's imports then run beside the
driver's.
"""

from __future__ import annotations

import multiprocessing
import sys

WORKER_PRELOAD = ["distributed", "hrl_tasks.scheduler.runtime", "hrl_tasks.rollout.worker"]
"""What the server imports once for every worker forked from it (no torch)."""


def available() -> bool:
    """Whether worker processes can be forked from a server here (not on Windows)."""
    return sys.platform != "win32" and "forkserver" in multiprocessing.get_all_start_methods()


def start(preload: list[str] | None = None) -> None:
    """Start the server now, importing ``preload`` (default `WORKER_PRELOAD`), unless
    it runs already; returns without waiting for its imports."""
    if not available():
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(preload or WORKER_PRELOAD)
    forkserver.ensure_running()
