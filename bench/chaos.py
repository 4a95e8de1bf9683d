"""Chaos: each algorithm trains to its threshold while its worker processes are killed.

For each run of bench/learning.py (the same settings, thresholds and budgets),
once training reports iteration ``--kill-after``, a thread kills (SIGKILL) the
process of rollout worker 1, then ``--gap`` seconds later the process of a
second component: rollout worker 2, or for Ape-X the process holding replay
shard 0 (its contents are lost and it refills), or for ES (episodes are tasks,
there are no rollout workers) any worker process. No algorithm has a learner
in a worker process today (IMPALA's learner is a thread of the driver, which
``--resume`` covers). The same run without kills goes first (``--no-baseline``
skips it), on the same seed.

Per run, one JSON line: whether the threshold was reached, env steps and wall
time to it (with and without kills), and per kill what was killed, how long
progress stalled (the longest gap between iteration ends from the kill until
the next one, at most 60 s, less the median gap before it) and how many env steps could have been in
flight on the killed process (an upper bound on what the kill cost: a lost
sample call's batch is sampled again). Not part of CI (tests/algorithms/
test_lost_workers.py is the short version).

    python bench/chaos.py [--only ppo-cartpole impala-cartpole] [--seed 0] [--table]
"""

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import RUNS  # noqa: E402

import hrl_tasks  # noqa: E402
from hrl_tasks.algorithms import get_algorithm, stop_reached  # noqa: E402


def kill_targets(algo, engine) -> list:
    """Functions returning ``(what, address)`` of the process to kill, read at kill time
    (a re-created component has moved)."""
    handles = list(algo.workers.remote_workers)
    if not handles:  # ES: its episodes run as tasks on any worker

        def any_worker():
            return "a worker process running episodes", sorted(engine.client.run(os.getpid))[0]

        return [any_worker, any_worker]
    first = [lambda: ("rollout worker 1", handles[0].address)]
    if getattr(algo, "shards", None):
        return first + [lambda: ("replay shard 0", algo.shards[0].address)]
    return first + [lambda: (f"rollout worker {len(handles)}", handles[-1].address)]


def in_flight_steps(algo) -> int:
    """Env steps the sample calls in flight on one rollout worker hold at most."""
    cfg = algo.config
    per_call = cfg.num_envs_per_worker * cfg.rollout_fragment_length
    if algo.name == "es":  # a perturbation task per thread, two episodes of at most 500 steps
        return 2 * cfg.episodes_per_perturbation * 500 * algo.threads_per_worker
    return per_call * getattr(cfg, "num_async", 1)


class Killer:
    """Kills the targets' processes one after the other, ``gap`` seconds apart."""

    def __init__(self, engine, targets, gap: float):
        self.engine, self.targets, self.gap = engine, targets, gap
        self.kills: list[dict] = []
        self.thread = threading.Thread(target=self._run, daemon=True, name="chaos")

    def _run(self) -> None:
        for i, target in enumerate(self.targets):
            if i:
                time.sleep(self.gap)
            what, address = target()
            pids = self.engine.client.run(os.getpid)
            held = sorted(self._held_at(address))
            os.kill(pids[address], signal.SIGKILL)
            self.kills.append({"what": what, "address": address, "held": held,
                               "at": time.perf_counter()})  # fmt: skip

    def _held_at(self, address):
        objects = self.engine.backend.state.objects.values()
        return [o.name for o in objects if o.address == address]


def run(name: str, spec: dict, seed: int, kill_after: int | None, gap: float) -> dict:
    algo_cls = get_algorithm(spec["algorithm"])
    stop = {"episode_return_mean": spec["threshold"], "env_steps_sampled": spec["budget"]}
    config = {**spec["config"], "env": spec["env"], "seed": seed}
    n_workers = max(1, config.get("num_workers", 2))
    with hrl_tasks.Engine.local(
        n_workers=n_workers, threads_per_worker=algo_cls.threads_per_worker
    ) as engine:
        algo = algo_cls(config, engine=engine)
        killer = Killer(engine, kill_targets(algo, engine), gap) if kill_after else None
        ends, start = [], time.perf_counter()
        try:
            while True:
                result = algo.train()
                ends.append(time.perf_counter())
                if killer and result["iteration"] == kill_after:
                    killer.thread.start()
                if stop_reached(result, stop):
                    break
            wall = time.perf_counter() - start
            if killer:
                killer.thread.join(timeout=gap * 3 + 30)
            done = list(killer.kills) if killer else []
            untils = [k["at"] for k in done[1:]] + [float("inf")] * bool(done)
            kills = [
                summarize(k, u, ends, in_flight_steps(algo))
                for k, u in zip(done, untils, strict=True)
            ]
            restarts = [h.restarts for h in algo.workers.remote_workers]
            return {
                "run": name, "kills": len(kills), "seed": seed,
                "reached": result["episode_return_mean"] >= spec["threshold"],
                "return": round(result["episode_return_mean"], 1),
                "env_steps": result["env_steps_sampled"], "wall_s": round(wall, 1),
                "iterations": result["iteration"], "restarts": restarts,
                "workers_lost": engine.stats()["workers_lost"], "per_kill": kills,
            }  # fmt: skip
        finally:
            algo.stop()


def summarize(kill: dict, until: float, ends: list, in_flight: int) -> dict:
    """The stall a kill caused: the longest gap between iteration ends from the kill
    until the next kill (at most 60 s), less the median gap before it."""
    before = [b - a for a, b in zip(ends, ends[1:], strict=False) if b < kill["at"]]
    after = [e for e in ends if kill["at"] <= e <= min(until, kill["at"] + 60)]
    gaps = [b - a for a, b in zip([kill["at"], *after], after, strict=False)]
    typical = statistics.median(before) if before else 0.0
    stall = max(gaps) - typical if gaps else float("nan")
    return {"what": kill["what"], "held": kill["held"], "stall_s": round(max(0.0, stall), 2),
            "steps_in_flight_at_most": in_flight}  # fmt: skip


def table(rows: list[dict]) -> str:
    """Markdown rows: one per chaos run, beside its baseline."""
    out = ["| run | kills (what) | reached | env steps (no kills) | wall s (no kills) | "
           "stall per kill, s | steps in flight per kill, at most |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    base = {r["run"]: r for r in rows if r["kills"] == 0}
    for r in (r for r in rows if r["kills"]):
        b = base.get(r["run"])
        what = "; ".join(f"{k['what']} ({', '.join(k['held']) or 'tasks'})" for k in r["per_kill"])
        out.append(
            f"| {r['run']} | {r['kills']}: {what} | {'yes' if r['reached'] else 'NO'} "
            f"{r['return']} | {r['env_steps']:,} ({b['env_steps']:,}) | {r['wall_s']} "
            f"({b['wall_s']}) | {', '.join(str(k['stall_s']) for k in r['per_kill'])} | "
            f"{r['per_kill'][0]['steps_in_flight_at_most'] if r['per_kill'] else ''} |"
            if b
            else f"| {r['run']} | {r['kills']}: {what} | {r['reached']} | {r['env_steps']:,} "
            f"| {r['wall_s']} | | |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[n for n in RUNS if n.endswith("cartpole")])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-after", type=int, default=3, help="iteration that starts the kills")
    parser.add_argument("--gap", type=float, default=5.0, help="seconds between the two kills")
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs without kills")
    parser.add_argument("--table", action="store_true", help="print a markdown table at the end")
    args = parser.parse_args()
    rows = []
    for name in args.only:
        for kill_after in ([] if args.no_baseline else [None]) + [args.kill_after]:
            row = run(name, RUNS[name], args.seed, kill_after, args.gap)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.table:
        print(table(rows))


if __name__ == "__main__":
    main()
