"""What an engine tells of the cluster it runs on: its workers, their resources,
the engine's statistics and its live page. A part of :class:`~hrl_tasks.scheduler.engine.Engine`
(its base class), reading the state machine under the backend's lock and asking
the client.
"""

from __future__ import annotations

import asyncio
import logging

import dask

from hrl_tasks.scheduler.errors import ResourceError
from hrl_tasks.scheduler.page import EnginePage
from hrl_tasks.scheduler.resources import check_satisfiable
from hrl_tasks.scheduler.runtime import local_resources

logger = logging.getLogger(__name__)


def requires_encryption(client_requires: bool, configured: bool, scheduler_address: str) -> bool:
    """Whether a cluster's connections are encrypted: its client requires encryption
    (its ``Security``), or Dask's configuration does (``distributed.comm.require-encryption``),
    or its scheduler speaks ``tls://``. Pure."""
    return bool(client_requires or configured) or scheduler_address.startswith("tls://")


class ClusterFacts:
    """The engine's questions about its cluster (see the module). Needs ``client``,
    ``state``, ``backend``, ``_page`` and ``_reaches_workers`` of the engine."""

    def demand(self) -> int:
        """Threads' worth of work this engine has: plain tasks not done and stateful
        workers alive (what adaptive scaling sizes the cluster by)."""
        with self.backend.lock:
            return self.state.demand()

    @property
    def encrypted(self) -> bool:
        """Whether this cluster's connections are encrypted (`requires_encryption`):
        then what else its processes send one another in the clear is an exposure."""
        if self.client is None:  # everything in this process
            return False
        configured = dask.config.get("distributed.comm.require-encryption", False)
        return requires_encryption(
            self.client.security.require_encryption, configured, self.client.scheduler.address
        )

    @property
    def dashboard_link(self) -> str | None:
        """The address of the Dask dashboard."""
        return self.client.dashboard_link

    @property
    def page_link(self) -> str:
        """The address of the engine's live page: every engine task by worker and by
        name (the direct route's too, which Dask's dashboard does not see) and the
        stateful workers, refreshed every second; ``json`` after it gives the same as
        JSON. Served from the first time this is read, by this process, on 127.0.0.1,
        to requests that carry the link's random token and a loopback ``Host``
        (`hrl_tasks.scheduler.page`): pass the link on only to those who may read it."""
        with self.backend.lock:
            if self._page is None:
                self._page = EnginePage(self.view)
        return self._page.link

    def view(self) -> dict:
        """What the live page shows (`EngineState.view`), read under the engine's lock."""
        with self.backend.lock:
            return self.state.view()

    # --- the workers --------------------------------------------------------

    def worker_addresses(self) -> list[str]:
        """The addresses of the cluster's workers now, as the scheduler knows them."""
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int, timeout: float | None = None) -> None:
        """Block until the cluster has at least ``n`` workers (a batch cluster's jobs start).

        Raises:
            TimeoutError: if they are not there within ``timeout`` seconds.
        """
        self.client.wait_for_workers(n, timeout=timeout)

    def run_on_workers(self, fn, *args, workers: list[str] | None = None, on_error: str = "raise"):
        """Run ``fn(*args)`` once in each worker process (or those of ``workers``), outside
        the task queue; returns ``{address: result}``. ``on_error="ignore"`` skips workers
        that fail or leave meanwhile. For set-up and inspection, not for work."""
        return self.client.run(fn, *args, workers=workers, on_error=on_error)

    # --- resources ----------------------------------------------------------

    @property
    def ledger(self):
        """What each worker declared and what stateful workers hold (read only)."""
        return self.state.ledger

    def capacity(self) -> dict[str, dict[str, float]]:
        """Per worker, the resources it declares (a copy)."""
        with self.backend.lock:
            return {w: dict(declared) for w, declared in self.state.ledger.capacity.items()}

    @property
    def nthreads(self) -> dict[str, int]:
        """Threads per worker (read only)."""
        return self.state.nthreads

    def check_resources(self, request: dict) -> None:
        """Raise :class:`ResourceError` if no worker could ever meet ``request``."""
        if not request:
            return
        with self.backend.lock:
            capacity = dict(self.state.ledger.capacity)
        if capacity:
            try:
                check_satisfiable(request, capacity)
                return
            except ResourceError:  # the engine's view may lag (a worker that just joined)
                pass
        capacity = {w: declared for w, (_, declared) in self.backend.read_workers().items()}
        check_satisfiable(request, capacity)

    def resources(self) -> dict:
        """Per worker: what it declared, what stateful workers hold, what is free now."""
        free_now = self.run_on_workers(local_resources)
        with self.backend.lock:
            ledger = self.state.ledger
            return {
                w: {
                    "declared": dict(cap),
                    "held_by_objects": ledger.held_on(w),
                    "available": free_now.get(w, {}),
                }
                for w, cap in ledger.capacity.items()
            }

    def reaches_workers(self, timeout: float = 5.0) -> bool:
        """Whether this process can connect to every worker itself, as direct calls do.

        On the embedded cluster it always can; on a remote one (``connect``,
        ``from_cluster``) the workers may only be reachable by the scheduler.
        Asks each worker for its identity once and remembers the answer.
        """
        if self._reaches_workers is None:
            with self.backend.lock:
                addresses = sorted(self.nthreads)

            async def identities():
                calls = [self.client.rpc(address).identity() for address in addresses]
                await asyncio.wait_for(asyncio.gather(*calls), timeout)

            try:
                self.client.sync(identities)
                self._reaches_workers = True
            except (OSError, asyncio.TimeoutError) as exc:
                logger.warning("hrl_tasks: the workers cannot be called directly: %r", exc)
                self._reaches_workers = False
        return self._reaches_workers

    # --- statistics ---------------------------------------------------------

    def stats(self) -> dict:
        """Counters (submitted, finished, failed, retried, cancelled, workers_lost)
        and, per task name, the count and quantiles of execution durations.

        Durations are measured on the workers and arrive in batches every 0.1 s;
        they include the nested tasks that this engine's tasks submitted, while
        the counters count what this engine submitted itself.
        """
        with self.backend.lock:
            return self.state.stats.snapshot()

    def slow_workers(self) -> set[str]:
        """Workers known to be slow now: speculative work avoids them for a while."""
        with self.backend.lock:
            return self.state.slow_workers()
