"""The engine's speculation at run time: it watches copies and launches backups.

It follows every task's start and end as the workers report them, keeps the
duration statistics per task name and the speed of each worker, and, every
``CHECK_INTERVAL_S``, asks :func:`~hrl_tasks.scheduler.speculation.plan_backups`
which speculative tasks need a backup and where. The first copy to finish
wins (``TaskRef`` resolves with it); the others are cancelled if they have
not started, and otherwise run to their end, ignored.

A plain task's backup is another attempt of the same function on another
worker (pure tasks give identical results). A stateful-worker call made with
``speculative=True`` on a member of a :class:`WorkerGroup` is backed up by the
same call on an idle peer of the group (equivalent results, fine for sampling).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from hrl_tasks.scheduler.speculation import Copy, SpecTask, WorkerSpeed, plan_backups

if TYPE_CHECKING:
    from hrl_tasks.scheduler.engine import Engine
    from hrl_tasks.scheduler.taskref import TaskRef

CHECK_INTERVAL_S = 0.02


class Speculator:
    """Speculation state of one engine; its thread starts with the first speculative task."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.lock = threading.Lock()
        self.running: dict[str, tuple[str, float]] = {}  # key -> (worker, started at)
        self.busy: dict[str, int] = {}  # worker -> copies running there
        self.live: set[TaskRef] = set()
        self.losers: dict[str, float] = {}  # loser key -> when the winner finished
        self.pending: dict[str, tuple[str, TaskRef]] = {}  # backup sent, not started yet
        self.detached: dict[str, str] = {}  # running losers, out of their worker's pool
        self.speed = WorkerSpeed()
        self.thread: threading.Thread | None = None

    # --- events from the workers (client event loop) -------------------------------

    def on_start(self, key: str, worker: str, at: float) -> None:
        with self.lock:
            self.running[key] = (worker, at)
            if self.pending.pop(key, None) is None:  # a backup's slot was taken at launch
                self.busy[worker] = self.busy.get(worker, 0) + 1

    def on_end(self, key: str, name: str, worker: str, elapsed: float, at: float) -> None:
        with self.lock:
            if self.running.pop(key, None) is not None and self.detached.pop(key, None) is None:
                self.busy[worker] = max(0, self.busy.get(worker, 0) - 1)
            won_at = self.losers.pop(key, None)
            if won_at is None and (self.live or self.speed.slow_until):
                self.speed.record(worker, elapsed, self._typical(name), at)
        if won_at is not None and at > won_at:
            self.engine._count("time_saved_s", at - won_at)

    # --- driver side ------------------------------------------------------------

    def track(self, ref: TaskRef) -> None:
        with self.lock:
            self.live.add(ref)
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="speculator", daemon=True)
                self.thread.start()

    def healthy_workers(self) -> list[str] | None:
        """Where new speculative work should go; ``None`` when that is anywhere.

        Not to workers known to be slow (a losing copy that still runs does
        not count: it has left its worker's pool).
        """
        with self.lock:
            avoid = self.speed.slow(time.monotonic())
        if not avoid:
            return None
        healthy = sorted(set(self.engine.nthreads) - avoid)
        return healthy or None

    def on_finished(self, ref: TaskRef, winner_key: str, loser_keys: list[str]) -> None:
        """A speculative task resolved with the copy ``winner_key``."""
        if not ref.backups:
            return
        backup_won = winner_key in ref.backups
        self.engine._count("backup_won" if backup_won else "original_won")
        now = time.monotonic()
        typical = self._typical(ref.name) if backup_won else None
        with self.lock:
            for key in loser_keys:
                if backup_won:
                    self.losers[key] = now  # for time_saved_s, when the loser ends
                if key not in self.running or key in self.detached:
                    continue
                worker, started = self.running[key]
                # The cancelled copy leaves its worker's pool (WorkerRuntime.detach):
                # it runs on to its end, ignored, but no longer takes a thread.
                self.detached[key] = worker
                self.busy[worker] = max(0, self.busy.get(worker, 0) - 1)
                if backup_won:  # losing to a backup says something of the worker
                    self.speed.record(worker, now - started, typical, now)

    def _typical(self, name: str) -> float | None:
        with self.engine._stats_lock:
            window = self.engine._stats.durations.get(name)
            return None if window is None else window.quantile(0.5)

    # --- the loop ---------------------------------------------------------------

    def _loop(self) -> None:
        while not self.engine.closed:
            time.sleep(CHECK_INTERVAL_S)
            try:
                self.step(time.monotonic())
            except Exception:  # a planning error must not stop speculation for good
                if self.engine.closed:
                    return

    def step(self, now: float) -> None:
        with self.lock:
            self.live = {r for r in self.live if not r.done()}
            live = list(self.live)
            for key, (worker, ref) in list(self.pending.items()):
                if ref.done() and key not in ref._live:  # cancelled before it started
                    del self.pending[key]
                    self.busy[worker] = max(0, self.busy.get(worker, 0) - 1)
        if not live:
            return
        tasks, by_id = [], {}
        for ref in live:
            task = self._view(ref)
            if task is not None:
                tasks.append(task)
                by_id[task.task_id] = ref
        names = {t.name for t in tasks}
        with self.engine._stats_lock:
            windows = self.engine._stats.durations
            durations = {n: list(windows[n].values) for n in names if n in windows}
        threads = self.engine.nthreads
        with self.lock:
            free = {w: n - self.busy.get(w, 0) for w, n in threads.items()}
            slow = self.speed.slow(now)
            busy_since: dict[str, float] = {}
            for key, (worker, started) in self.running.items():
                if key not in self.detached:
                    busy_since[worker] = min(started, busy_since.get(worker, started))
        for backup in plan_backups(now, tasks, durations, free, slow, busy_since):
            self._launch(by_id[backup.task_id], backup.worker)

    def _view(self, ref: TaskRef) -> SpecTask | None:
        with ref._lock:
            keys = {key: submitted for key, submitted in ref.copies.items() if key in ref._live}
        for peer_ref in ref.linked:
            with peer_ref._lock:
                keys.update({k: peer_ref.copies.get(k, 0.0) for k in peer_ref._live})
        if not keys:
            return None
        with self.lock:
            copies = tuple(
                Copy(*self.running.get(key, (None, None)), submitted_at=submitted)
                for key, submitted in keys.items()
            )
        allowed = None
        if ref.call_info is not None:
            allowed = frozenset(p.address for p in self._idle_peers(ref))
            if not allowed:
                return None
        return SpecTask(str(id(ref)), ref.name, copies, ref.speculation, allowed)

    def _reserve(self, key: str, worker: str, ref: TaskRef) -> None:
        """Count a backup against its worker's threads from the moment it is sent."""
        with self.lock:
            if key not in self.running:
                self.pending[key] = (worker, ref)
                self.busy[worker] = self.busy.get(worker, 0) + 1

    def _idle_peers(self, ref: TaskRef):
        record = ref.call_info[0]
        group = record.group or []
        return [
            peer
            for peer in group
            if peer is not record
            and peer.gone is None
            and peer.address is not None
            and peer.address != record.address
            and not peer.calls
        ]

    def _launch(self, ref: TaskRef, worker: str) -> None:
        if ref.done():
            return
        self.engine._count("speculated")
        if ref.call_info is None:
            ref._start_backup(worker)
            self._reserve(ref.future.key, worker, ref)
            return
        peer = next((p for p in self._idle_peers(ref) if p.address == worker), None)
        if peer is None:
            return
        method, args, kwargs = ref.call_args
        backup = peer.call(method, args, kwargs, internal=True, direct=ref.direct)
        ref.linked.append(backup)
        ref.backups.update(backup.copies)
        for key in backup.copies:
            self._reserve(key, worker, backup)

        def adopt(done: TaskRef) -> None:
            if done.exception(timeout=0) is None and not ref.done():
                ref._finish(done.future, by_backup=True)

        backup.add_done_callback(adopt)
