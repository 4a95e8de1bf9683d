"""The engine's state machine at scale, on a simulated cluster and a fake clock.

`EngineState.handle` is fed what a real backend would feed it, by a simulated
cluster of ``--workers`` one-thread workers: every launch starts a moment later and
ends after its task's duration (reported as the stream reports: started, ended,
done, answers of one moment in one call); a Refresh is answered by a read of the
workers a moment later; the user keeps ``2 x workers`` tasks in flight, submitting
in batches, and drops each ref once its task resolved (as a TaskRef does: not those
of creations and destructions). Only the time inside ``handle`` is counted; the
rest is the simulation's.

The mixes, per worker count:

- ``plain``: ``--tasks`` plain tasks on the engine's route, while 1% of the
  workers die (their stream breaks, their attempts fail as lost, the scheduler
  removes them) and as many join, every ``--churn-every`` tasks;
- ``trees``: ``--trees`` nested trees (depth 4, fan-out 8: 4,681 tasks each), every
  inner task submitting its children when it starts and waiting for them (its
  slot lent);
- ``objects``: ``--objects`` stateful objects made, called once each, and ended;
- ``memory``: the state's bytes per live and per released task (`memory`).

Printed, one JSON line: per worker count and mix the events, the seconds inside
``handle``, microseconds per event and tasks decided per second (submit to
resolve); the state's entries left once every ref was dropped, and the task ids
and attempt keys among them (what released tasks left behind); and the targets:
cost per event at the most workers over that at the fewest (<= 1.5, every mix),
no task id left, at least 20,000 plain tasks a second at the most workers.

    python bench/scale_sim.py [--workers 16 256 4096] [--tasks 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import heapq
import itertools
import json
import platform
import random
import re
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrl_tasks.scheduler import events as ev  # noqa: E402
from hrl_tasks.scheduler.state import EngineState  # noqa: E402

TASK_S = 0.010  # a plain task's duration on the fake clock
START_S = 0.0005  # from launch to its start report
TICK_S = 0.1
READ_S = 0.005  # a read of the scheduler's workers, asked by a Refresh
DEPTH, FAN_OUT = 4, 8
MIXES = ("plain", "trees", "objects")
CPU = {"CPU": 1.0}  # what each worker declares
CREATED = {"has_state": False, "thread_safe": False}


class SimulatedCluster:
    """Workers that run what the state launches, on a fake clock (see the module)."""

    def __init__(self, n_workers: int, seed: int = 0):
        self.state = EngineState("s")
        self.rng = random.Random(seed)
        self.now = 0.0
        self.queue: list = []  # (time, seq, events)
        self.seq = itertools.count()
        self.names = itertools.count(n_workers)
        self.workers = {f"w{i}": (1, dict(CPU)) for i in range(n_workers)}
        self.running: dict[str, tuple[str, ev.Launch]] = {}  # key -> (worker, launch)
        self.resolved: list[str] = []  # task ids resolved, refs to drop
        self.children: dict[str, list[str]] = {}  # a tree node's key -> its children's ids
        self.parent_of: dict[str, str] = {}  # a child's task id -> its parent's key
        self.waiting_on: dict[str, int] = {}  # a parent's key -> children not resolved
        self.done_ids: set[str] = set()
        self.refreshing = False
        self.handle_s = 0.0
        self.events = 0
        self.handle(ev.WorkersSeen(dict(self.workers)))

    # --- the state machine, timed -------------------------------------------------

    def handle(self, *events) -> None:
        start = time.perf_counter()
        out = self.state.handle(*events, now=self.now)
        self.handle_s += time.perf_counter() - start
        self.events += len(events)
        self._carry_out(out)

    def _carry_out(self, out: list) -> None:
        for instruction in out:
            if isinstance(instruction, ev.Launch):
                self._launch(instruction)
            elif isinstance(instruction, (ev.Resolve, ev.Fail)):
                self._resolved(instruction.task_id)
            elif isinstance(instruction, ev.Later):
                self.at(self.now + instruction.delay, instruction.event)
            elif isinstance(instruction, ev.Refresh) and not self.refreshing:
                self.refreshing = True  # the backend reads the scheduler's workers
                self.at(self.now + READ_S, "read")

    def at(self, when: float, *events) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), events))

    def _launch(self, launch: ev.Launch) -> None:
        worker = launch.workers[0] if launch.workers else self.rng.choice(list(self.workers))
        if worker not in self.workers:
            self.at(self.now, ev.AttemptDone(launch.key, "error", OSError("gone"), True))
            return
        self.running[launch.key] = (worker, launch)
        self.at(self.now + START_S, ev.Started(launch.key, worker))
        if launch.name.startswith("node-") and launch.kind == "task":
            self.at(self.now + START_S, ("branch", launch.key, launch.name))
            return
        self._end_at(launch.key, self.now + START_S + TASK_S * self.rng.uniform(0.5, 1.5))

    def _end_at(self, key: str, when: float) -> None:
        worker, launch = self.running[key]
        elapsed = when - self.now
        value = CREATED if launch.kind == "create" else None  # what a creation reports
        done = ev.AttemptDone(key, "finished", value=value)
        self.at(when, ev.Ended(key, launch.name, worker, elapsed), done)

    def _resolved(self, task_id: str) -> None:
        if not task_id.endswith(("-c", "-k")):  # creations' and destructions' refs tell
            self.resolved.append(task_id)  # nothing when dropped (TaskRef.forgotten_at_end)
        self.done_ids.add(task_id)
        parent = self.parent_of.pop(task_id, None)
        if parent is not None and parent in self.waiting_on:
            self.waiting_on[parent] -= 1
            if self.waiting_on[parent] == 0:
                del self.waiting_on[parent]
                self.at(self.now, ev.AttemptWaits(parent, False))
                if parent in self.running:
                    self._end_at(parent, self.now + 0.0001)

    # --- the simulation ------------------------------------------------------------

    def step(self) -> bool:
        """Carry out the next moment's events (one call); False when none is left."""
        if not self.queue:
            return False
        when = self.queue[0][0]
        self.now = max(self.now, when)
        batch = []
        while self.queue and self.queue[0][0] <= when:
            batch += heapq.heappop(self.queue)[2]
        events = []
        for item in batch:
            if item == "read":
                self.refreshing = False
                events.append(ev.WorkersSeen(dict(self.workers)))
            elif isinstance(item, tuple) and item and item[0] == "branch":
                events += self._branch(*item[1:])
            else:
                if isinstance(item, ev.AttemptDone):
                    self.running.pop(item.key, None)
                events.append(item)
        if events:
            self.handle(*events)
        return True

    def _branch(self, key: str, name: str) -> list:
        """Tree node ``key`` started: it submits its children and waits for them."""
        depth = int(name.split("-")[1])
        if key not in self.running:
            return []
        if depth == DEPTH:
            self._end_at(key, self.now + TASK_S)
            return []
        ids = [f"{key}.{i}" for i in range(FAN_OUT)]
        self.waiting_on[key] = len(ids)
        for child in ids:
            self.parent_of[child] = key
        submits = [ev.SubmitTask(c, f"node-{depth + 1}", route="direct") for c in ids]
        return [*submits, ev.AttemptWaits(key, True)]

    def drop_refs(self) -> None:
        if self.resolved:
            released, self.resolved = tuple(self.resolved), []
            self.handle(ev.Released(released))

    def churn(self, n: int) -> None:
        """``n`` workers die (their streams break, the scheduler removes them) and ``n``
        new ones join."""
        for address in self.rng.sample(sorted(self.workers), n):
            del self.workers[address]
            lost = [k for k, (w, _) in self.running.items() if w == address]
            error = OSError(f"lost the task stream to worker {address}")
            done = [ev.AttemptDone(k, "error", error, worker_lost=True) for k in lost]
            for k in lost:
                del self.running[k]
            self.handle(ev.StreamLost(address), *done, ev.WorkerRemoved(address))
        for _ in range(n):
            self.workers[f"w{next(self.names)}"] = (1, dict(CPU))
        self.handle(ev.WorkersSeen(dict(self.workers)))

    def run_until(self, done) -> None:
        next_tick = self.now + TICK_S
        while not done():
            if not self.step():
                raise RuntimeError("nothing left to happen, and not done")
            if self.now >= next_tick:
                next_tick = self.now + TICK_S
                self.handle(ev.Tick())
            self.drop_refs()


def plain(n_workers: int, tasks: int, churn_every: int) -> dict:
    sim = SimulatedCluster(n_workers)
    window, batch = 2 * n_workers, max(1, min(1000, n_workers))
    submitted = 0
    next_churn = churn_every
    while len(sim.done_ids) < tasks:
        while submitted - len(sim.done_ids) < window and submitted < tasks:
            n = min(batch, tasks - submitted, window - (submitted - len(sim.done_ids)))
            sim.handle(
                *[ev.SubmitTask(f"t{submitted + i}", "plain", route="direct") for i in range(n)]
            )
            submitted += n
        if len(sim.done_ids) >= next_churn:
            sim.churn(max(1, n_workers // 100))
            next_churn += churn_every
        if not sim.step():
            raise RuntimeError("plain: nothing left to happen")
        sim.drop_refs()
    sim.run_until(lambda: not sim.running)
    return report(sim, tasks)


def trees(n_workers: int, n_trees: int) -> dict:
    sim = SimulatedCluster(n_workers, seed=1)
    sim.handle(*[ev.SubmitTask(f"r{i}", "node-0", route="direct") for i in range(n_trees)])
    roots = {f"r{i}" for i in range(n_trees)}
    sim.run_until(lambda: roots <= sim.done_ids)
    per_tree = sum(FAN_OUT**d for d in range(DEPTH + 1))
    return report(sim, n_trees * per_tree)


def objects(n_workers: int, n_objects: int) -> dict:
    sim = SimulatedCluster(n_workers, seed=2)
    ids = [f"o{i}" for i in range(n_objects)]
    for start in range(0, n_objects, 1000):
        part = ids[start : start + 1000]
        sim.handle(*[ev.CreateObject(o, f"{o}-c", "Obj", "Obj") for o in part])
        sim.handle(*[ev.CallObject(f"{o}-m", o, "step", direct_call=True) for o in part])
        sim.handle(*[ev.KillObject(o, f"{o}-k") for o in part])
    wanted = {f"{o}-{s}" for o in ids for s in "cmk"}
    # Then until the sweep's next read of the scheduler lets the ledger forget them.
    sim.run_until(lambda: wanted <= sim.done_ids and not sim.state.ledger.released)
    return report(sim, 3 * n_objects)


def memory(n_workers: int, tasks: int, rounds: int = 4) -> dict:
    """Bytes the state's code allocated and still holds (tracemalloc, by the engine's
    files): per live task, with ``tasks`` submitted at once (every worker busy, the
    rest waiting for a slot); per released task, as what it holds grew from the end
    of the first such round to the end of the last, each run, resolved and dropped
    (so that tables sized for the peak, which Python does not shrink, are not
    counted as kept), the story's log apart (its sizes reported)."""
    sim = SimulatedCluster(n_workers, seed=3)
    engine_files = [tracemalloc.Filter(True, str(Path(ev.__file__).parent / "*"))]

    def held() -> int:
        log, sim.state.log = sim.state.log, None  # the story's log apart
        snapshot = tracemalloc.take_snapshot().filter_traces(engine_files)
        sim.state.log = log
        return sum(stat.size for stat in snapshot.statistics("filename"))

    tracemalloc.start()
    after = []
    for round_ in range(rounds):
        ids = [f"t{round_}.{i}" for i in range(tasks)]
        before = held()
        sim.handle(*[ev.SubmitTask(task_id, "plain", route="direct") for task_id in ids])
        live = held() - before
        sim.run_until(lambda ids=ids: sim.done_ids.issuperset(ids))
        sim.drop_refs()
        after.append(held())
    tracemalloc.stop()
    log = sim.state.log
    return {
        "tasks": tasks,
        "bytes_per_live_task": round(live / tasks),
        "bytes_per_released_task": round((after[-1] - after[0]) / ((rounds - 1) * tasks), 2),
        "stories_kept": {"live": len(log.live), "ended": len(log.ended)},
    }


def report(sim: SimulatedCluster, tasks: int) -> dict:
    sim.drop_refs()
    return {
        "tasks": tasks,
        "events": sim.events,
        "handle_s": round(sim.handle_s, 3),
        "us_per_event": round(1e6 * sim.handle_s / max(1, sim.events), 2),
        "tasks_per_s": round(tasks / sim.handle_s),
        "left": entries_left(sim.state),
        "task_ids_left": task_ids_left(sim.state),
    }


def entries_left(state: EngineState) -> dict:
    """Entries in the state's collections once every ref was dropped (the story's
    log apart), by collection: what released tasks left behind beside what is kept
    per worker and per task name."""
    left = {}
    for name, value in vars(state).items():
        if name == "log":
            continue
        if isinstance(value, (dict, set, list)) and len(value) > 0:
            left[name] = len(value)
    return left


def task_ids_left(state: EngineState) -> int:
    """Strings anywhere in the state (its story's log apart) that are neither a
    worker's address nor a task's name: task ids and attempt keys kept after their
    tasks were released (none is the target)."""
    per_worker_or_name = re.compile(r"^(w\d+|plain|node-\d|Obj(\.\w+)?)$")
    constant = {state.key_prefix, *state.stats.counters, *CPU}  # counted by name
    seen: set[int] = set()

    def count(value, depth: int) -> int:
        if depth > 6 or id(value) in seen:
            return 0
        seen.add(id(value))
        if isinstance(value, str):
            return 0 if value in constant or per_worker_or_name.match(value) else 1
        if isinstance(value, dict):
            return sum(count(k, depth + 1) + count(v, depth + 1) for k, v in value.items())
        if isinstance(value, (set, frozenset, list, tuple, collections.deque)):
            return sum(count(v, depth + 1) for v in value)
        if hasattr(value, "__dict__") and not callable(value):
            return sum(count(v, depth + 1) for k, v in vars(value).items() if k != "log")
        return 0

    return count(state, 0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 256, 4096])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--churn-every", type=int, default=50_000)
    parser.add_argument("--memory-tasks", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="100,000 tasks, 4 trees")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.trees, args.objects = 100_000, 4, 2_000
        args.churn_every = 10_000
    figures = {}
    for n in args.workers:
        figures[n] = {
            "plain": plain(n, args.tasks, args.churn_every),
            "trees": trees(n, args.trees),
            "objects": objects(n, args.objects),
        }
        assert tuple(figures[n]) == MIXES
        figures[n]["memory"] = memory(n, args.memory_tasks)
        print(json.dumps({"workers": n, **figures[n]}), file=sys.stderr, flush=True)
    fewest, most = min(args.workers), max(args.workers)
    growth = {
        mix: round(figures[most][mix]["us_per_event"] / figures[fewest][mix]["us_per_event"], 3)
        for mix in MIXES
    }
    ids_left = {n: {mix: f[mix]["task_ids_left"] for mix in MIXES} for n, f in figures.items()}
    plain_rate = figures[most]["plain"]["tasks_per_s"]
    print(
        json.dumps(
            {
                "bench": "scale_sim",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, Python {platform.python_version()}",
                "args": vars(args),
                "figures": figures,
                "cost_per_event_most_over_fewest": growth,
                "task_ids_left": ids_left,
                "plain_tasks_per_s_at_most": plain_rate,
                "targets_met": {
                    "cost_per_event_at_most_1.5x": all(g <= 1.5 for g in growth.values()),
                    "no_task_ids_left": not any(v for f in ids_left.values() for v in f.values()),
                    "plain_20000_tasks_per_s": plain_rate >= 20_000,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
