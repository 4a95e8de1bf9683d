"""Chaos, as a matrix: each algorithm trains to its threshold while workers fail.

A cell is an algorithm and a fault schedule. Each cell runs the algorithm
with the settings of bench/learning.py (or of the game, composition and search
benches) until it reaches its threshold or runs out of budget, while a thread
carries out the schedule from the moment the second iteration ends. The same
run without faults goes first, on the same seed (``--no-baseline`` skips it).

Faults (``--faults``):

- ``one-kill``: SIGKILL of one worker process;
- ``kills-0.5s``, ``kills-1.5s``, ``kills-5s``: three kills that far apart;
- ``kill-in-recovery``: a kill, then a kill of the worker process that replaces
  it as soon as it joins, while what the first took is being rebuilt there;
- ``sigstop-30s``: a worker process frozen (SIGSTOP) for 30 s, then continued;
- ``learner-kill``: SIGKILL of the process holding the learner, for the runs whose
  learner has a process of its own (``apex``, and with ``num_learners=1``
  ``impala-apart``, ``appo-apart``, ``a3c-apart``);
- ``nanny-kill``: on a cluster of separate processes (``dask scheduler`` and one
  ``dask worker`` per worker, reached by address, as ``--address`` does), a
  worker's nanny killed with its worker: the cluster is one worker short for good;
- ``add-remove``: on that cluster, a worker added, and 5 s later one removed
  (closed as a batch system would end its job);
- ``monkey-<seed>``: a seeded random schedule of kills, bursts of kills and
  freezes, one every 20 s on average, for ``--monkey-minutes``;
- ``quick-monkey-<seed>``: the same kinds of faults, four on average within the
  time the run took without faults after its second iteration (a run of 8 s gets
  one every 1.5 s or so, where ``monkey-`` would have ended it before its first).

Per cell, one JSON line: whether the run ended on its own and reached the
threshold, env steps and wall time (and the baseline's), the longest time
without an iteration ending, and per fault what was done and how long the
iterations stalled after it. With faults a run has 1.5x its budget (env steps,
or minutes for the game, composition and search runs); its waits on the engine
are bounded by that time (``--max-minutes`` for runs budgeted in steps) plus
the faults' own length, and a wait past it ends with DeadlineReached: the cell
then says ``ended: false``.

    python bench/chaos.py --algorithms ppo es --faults one-kill kills-0.5s [--seed 0]
    python bench/chaos.py --algorithms all --faults monkey-0 monkey-1 monkey-2
    python bench/chaos.py --algorithms ppo appo --faults quick-monkey-0 quick-monkey-1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import GAMES, RUNS  # noqa: E402

import hrl_tasks  # noqa: E402
from hrl_tasks.algorithms import get_algorithm  # noqa: E402
from hrl_tasks.registry import get_config_class  # noqa: E402

STALL_WINDOW_S = 120.0
SEPARATE = ("nanny-kill", "add-remove")


# --- the algorithms, each a run to a threshold ------------------------------------


@dataclass
class Run:
    """An algorithm on its way to a threshold: ``step()`` one iteration."""

    name: str
    algorithm: str
    config: dict
    reached: callable
    budget_steps: int | None = None
    budget_s: float | None = None
    evaluate: callable = None  # (algo, result) -> dict of extra metrics, or None

    def build(self, engine, seed: int):
        return get_algorithm(self.algorithm)({**self.config, "seed": seed}, engine=engine)


def learning_runs() -> dict[str, Run]:
    """bench/learning.py's CartPole runs, and MPC's and TD3's on Pendulum, by algorithm name."""
    runs = {}
    for name, spec in RUNS.items():
        if not (name.endswith("cartpole") or name in ("mpc-pendulum", "td3-pendulum")):
            continue
        runs[spec["algorithm"]] = Run(
            name, spec["algorithm"], {**spec["config"], "env": spec["env"]},
            reached=lambda r, t=spec["threshold"]: r.get("episode_return_mean", -1e9) >= t,
            budget_steps=spec["budget"],
        )  # fmt: skip
    return runs


def alphazero_run() -> Run:
    spec = GAMES["alphazero-tictactoe"]
    return Run(
        "alphazero-tictactoe", "alphazero", {**spec["config"], "env": spec["env"]},
        reached=lambda r: r.get("loss_rate/minimax") == 0.0, budget_s=spec["minutes"] * 60,
    )  # fmt: skip


def composition_run() -> Run:
    from multiagent_tictactoe import TARGET, against_random, experiment

    def evaluate(algo, result):
        if result["iteration"] % 5:
            return None
        scores = against_random(algo, 400, result["iteration"])
        return {f"vs_random/{pid}": s["win_or_draw"] for pid, s in scores.items()}

    config = experiment(0)
    config.pop("seed")
    return Run(
        "composition-tictactoe", "composition", config,
        reached=lambda r: all(r.get(f"vs_random/{p}", 0) >= TARGET for p in ("ppo", "dqn")),
        budget_s=20 * 60, evaluate=evaluate,
    )  # fmt: skip


def all_runs() -> dict[str, Run]:
    runs = learning_runs()
    for name in ("impala", "appo", "a3c"):  # the learner in a process of its own (Ape-X's default)
        run = runs[name]
        runs[f"{name}-apart"] = Run(f"{run.name}-apart", name, {**run.config, "num_learners": 1},
                                    run.reached, run.budget_steps)  # fmt: skip
    runs["alphazero"] = alphazero_run()
    runs["composition"] = composition_run()
    runs["search"] = Run("search-ppo-cartpole", "search", {}, reached=lambda r: r["best"] >= 450,
                         budget_s=15 * 60)  # fmt: skip
    return runs


class SearchAsAlgorithm:
    """A search with trials as tasks (bench/search.py's grid, FIFO), as one long step.

    Its iterations are its trials' iterations: a thread watches the lines of their
    ``metrics.jsonl`` and calls ``on_iteration(times)`` with the time of each end seen
    (the faults start at the second, as for the other runs)."""

    def __init__(self, engine, seed: int, out: str, on_iteration=None):
        self.engine, self.seed, self.out = engine, seed, out
        self.on_iteration = on_iteration or (lambda ends: None)
        self.ends: list[float] = []

    def train(self) -> dict:
        from search import LEARNING_RATES

        from hrl_tasks.search import FIFOScheduler, grid

        done = threading.Event()
        watcher = threading.Thread(target=self.watch, args=(done,), daemon=True)
        watcher.start()
        try:
            result = hrl_tasks.tune(
                "ppo", env="CartPole-v1", space={"lr": grid(LEARNING_RATES[3:7])},
                config={"seed": self.seed}, num_samples=1, sampler="grid",
                scheduler=FIFOScheduler(), stop={"episode_return_mean": 450, "iteration": 100},
                out=self.out, engine=self.engine, verbose=False,
            )  # fmt: skip
        finally:
            done.set()
            watcher.join()
        best = result.best_trial["best"] if result.best_trial else -1e9
        return {"iteration": len(self.ends), "best": best, "env_steps_sampled": 0,
                "trials": {t["status"]: 1 for t in result.trials}}  # fmt: skip

    def watch(self, done: threading.Event) -> None:
        while not done.wait(0.2):
            lines = 0
            for path in Path(self.out, "trials").glob("*/metrics.jsonl"):
                with contextlib.suppress(OSError), open(path, "rb") as file:
                    lines += file.read().count(b"\n")
            while len(self.ends) < lines:
                self.ends.append(time.perf_counter())
                self.on_iteration(self.ends)

    def stop(self) -> None:
        return None


# --- the clusters -------------------------------------------------------------------


class SeparateCluster:
    """``dask scheduler`` and one ``dask worker`` process per worker, each with a nanny."""

    def __init__(self, n_workers: int, threads: int):
        self.dir = tempfile.mkdtemp(prefix="chaos-")
        self.file = os.path.join(self.dir, "scheduler.json")
        self.threads = threads
        # The scheduler unpickles task graphs and the workers run them: both need this
        # checkout and the bench modules whose envs the runs use (multiagent_tictactoe).
        bench = Path(__file__).resolve().parent
        path = [str(bench), str(bench.parent), os.environ.get("PYTHONPATH", "")]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
        self.scheduler = subprocess.Popen(
            ["dask", "scheduler", "--port", "0", "--dashboard-address", ":0",
             "--scheduler-file", self.file], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=self.env,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not os.path.exists(self.file):
            if time.monotonic() > deadline:
                raise RuntimeError("dask scheduler did not start")
            time.sleep(0.1)
        time.sleep(0.5)
        self.address = json.loads(Path(self.file).read_text())["address"]
        self.workers: list[subprocess.Popen] = [self.add_worker() for _ in range(n_workers)]

    def add_worker(self) -> subprocess.Popen:
        process = subprocess.Popen(
            ["dask", "worker", self.address, "--nworkers", "1", "--nthreads", str(self.threads),
             "--resources", f"CPU={self.threads}", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env,
        )  # fmt: skip
        return process

    def close(self) -> None:
        for process in [*self.workers, self.scheduler]:
            if process.poll() is None:
                process.terminate()
        for process in [*self.workers, self.scheduler]:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


# --- faults -------------------------------------------------------------------------


@dataclass
class Faults:
    """Carries out a fault schedule on the engine's workers, from a thread."""

    engine: object
    schedule: list  # (delay after the previous, action)
    cluster: SeparateCluster | None = None
    learner: callable = None  # () -> the address of the process holding the learner
    done: list = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True, name="chaos")
        thread.start()
        return thread

    def _run(self) -> None:
        for delay, action in self.schedule:
            if self.stopped.wait(delay):  # the run ended: no faults on the next one's workers
                return
            at = time.perf_counter()  # when it began (a freeze lasts 30 s)
            try:
                what = getattr(self, action)()
            except Exception as exc:  # noqa: BLE001 - a fault that could not be done is a row
                if self.stopped.is_set():  # the run ended (its cluster closed) meanwhile
                    return
                what = f"{action} failed: {exc!r}"
            self.done.append({"action": action, "what": what, "at": at})

    def pids(self) -> dict:
        found = {}
        while not found:  # every worker is being re-spawned: wait for one
            found = self.engine.run_on_workers(os.getpid, on_error="ignore")
            if not found:
                time.sleep(0.1)
        return found

    def kill(self) -> str:
        pids = self.pids()
        address = random.Random(len(self.done)).choice(sorted(pids))
        os.kill(pids[address], signal.SIGKILL)
        return f"killed {address}"

    def kill_replacement(self) -> str:
        before = set(self.pids())
        first = self.kill()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.stopped.is_set():
                return f"{first}; the run ended before a replacement joined"
            pids = self.engine.run_on_workers(os.getpid, on_error="ignore")
            new = sorted(set(pids) - before)
            if new:
                os.kill(pids[new[0]], signal.SIGKILL)
                return f"{first}, then its replacement {new[0]} as it joined"
            time.sleep(0.02)
        return f"{first}; no replacement joined within 60 s"

    def kill_learner(self) -> str:
        if self.learner is None:
            raise ValueError("this run has no learner in a process of its own")
        address = self.learner()
        os.kill(self.pids()[address], signal.SIGKILL)
        return f"killed the learner's {address}"

    def freeze(self, seconds: float = 30.0) -> str:
        pids = self.pids()
        address = sorted(pids)[0]
        os.kill(pids[address], signal.SIGSTOP)
        began = time.perf_counter()
        ended = self.stopped.wait(seconds)  # a run that ends meanwhile: continued then
        os.kill(pids[address], signal.SIGCONT)
        if ended:
            return f"froze {address}; the run ended {time.perf_counter() - began:.1f} s into it"
        return f"froze {address} for {seconds:g} s"

    def kill_nanny(self) -> str:
        process = next(p for p in self.cluster.workers if p.poll() is None)
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                  text=True).stdout.split()  # fmt: skip
        os.kill(process.pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        return f"killed nanny {process.pid} and its worker(s) {children}"

    def add(self) -> str:
        self.cluster.workers.append(self.cluster.add_worker())
        return "added a worker"

    def remove(self) -> str:
        process = self.cluster.workers[-1]
        process.terminate()
        return f"closed worker process {process.pid}"


def schedule_of(fault: str, monkey_minutes: float, window_s: float | None = None) -> list:
    """``[(seconds after the previous, action)]`` for a named fault; ``window_s`` is
    how long the run took without faults after its second iteration (``quick-monkey-``)."""
    kills = {"kills-0.5s": 0.5, "kills-1.5s": 1.5, "kills-5s": 5.0}
    if fault == "one-kill":
        return [(0.0, "kill")]
    if fault in kills:
        return [(0.0, "kill"), (kills[fault], "kill"), (kills[fault], "kill")]
    if fault == "kill-in-recovery":
        return [(0.0, "kill_replacement")]
    if fault == "sigstop-30s":
        return [(0.0, "freeze")]
    if fault == "learner-kill":
        return [(0.0, "kill_learner")]
    if fault == "nanny-kill":
        return [(0.0, "kill_nanny")]
    if fault == "add-remove":
        return [(0.0, "add"), (5.0, "remove")]
    if fault.startswith("monkey-"):
        return monkey(int(fault.split("-", 1)[1]), monkey_minutes * 60)
    if fault.startswith("quick-monkey-"):
        if window_s is None:
            raise ValueError(f"{fault} spreads its faults over the run without faults: "
                             "drop --no-baseline")  # fmt: skip
        window_s = max(window_s, 4.0)
        return monkey(int(fault.rsplit("-", 1)[1]), window_s, mean_gap_s=window_s / 4)
    raise ValueError(f"unknown fault {fault!r}")


def monkey(seed: int, seconds: float, mean_gap_s: float = 20.0) -> list:
    """A seeded random schedule: faults one every ``mean_gap_s`` on average, for ``seconds``."""
    rng, out, at = random.Random(seed), [], 0.0
    while True:
        gap = rng.expovariate(1 / mean_gap_s)
        at += gap
        if at > seconds:
            return out
        kind = rng.choices(["kill", "burst", "freeze", "kill_replacement"], [5, 2, 1, 1])[0]
        if kind == "burst":
            out += [(gap, "kill"), (rng.uniform(0.3, 3.0), "kill")]
        elif kind == "freeze":
            out.append((gap, "freeze"))
            at += 30.0
        else:
            out.append((gap, kind))


# --- one cell -----------------------------------------------------------------------


def cell(run: Run, fault: str | None, seed: int, baseline: dict | None, args) -> dict:
    separate = fault in SEPARATE
    shape = None  # the cluster the algorithm would start for itself, if any
    if run.algorithm != "search":
        shape = get_config_class(run.algorithm).from_dict(run.config).embedded_cluster()
    shape = shape or {
        "n_workers": max(1, run.config.get("num_workers", 2)),
        "threads_per_worker": 1,
    }
    n_workers, threads = shape["n_workers"], shape["threads_per_worker"]
    cluster = SeparateCluster(n_workers, threads) if separate else None
    engine = (hrl_tasks.Engine.connect(cluster.address) if separate
              else hrl_tasks.Engine.local(n_workers=n_workers, threads_per_worker=threads))  # fmt: skip
    if separate:
        engine.wait_for_workers(n_workers, timeout=60)
    window_s = baseline and baseline.get("after_second_s")
    schedule = [] if fault is None else schedule_of(fault, args.monkey_minutes, window_s)
    fault_s = sum(d for d, _ in schedule) + 30.0 * sum(a == "freeze" for _, a in schedule)
    stretch = 1.0 if fault is None else 1.5  # with faults: 1.5x the run's budget
    steps_cap = run.budget_steps and int(stretch * run.budget_steps)
    wall_cap = stretch * (run.budget_s or args.max_minutes * 60) + fault_s
    faults = Faults(engine, schedule, cluster)
    if run.algorithm == "search":  # a fresh directory: its trials' lines are counted
        os.makedirs(args.out, exist_ok=True)
        search_out = tempfile.mkdtemp(prefix=f"search-{fault or 'none'}-{seed}-", dir=args.out)
        algo = SearchAsAlgorithm(engine, seed, search_out,
                                 lambda ends: len(ends) == 2 and schedule and faults.start())  # fmt: skip
    else:
        algo = run.build(engine, seed)
    group = getattr(getattr(algo, "workers", None), "learner_group", None)
    if hasattr(group, "handle"):  # a learner in a process of its own
        faults.learner = lambda: group.handle.address
    ends, start, result, ended, error = [], time.perf_counter(), {}, True, None
    try:
        with engine.time_limit(wall_cap):
            while True:
                try:
                    result = algo.train()
                except hrl_tasks.DeadlineReached:
                    ended = False
                    break
                except Exception as exc:  # the run failed: it ended, unreached; cells go on
                    error = f"{type(exc).__name__}: {exc}"
                    break
                extra = run.evaluate(algo, result) if run.evaluate else None
                result.update(extra or {})
                ends.append(time.perf_counter())
                if len(ends) == 2 and schedule:
                    faults.start()
                if run.reached(result) or run.algorithm == "search":
                    break
                if steps_cap and result.get("env_steps_sampled", 0) >= steps_cap:
                    break
                if time.perf_counter() - start > wall_cap:
                    break
    finally:
        faults.stopped.set()
        algo.stop()
        engine.close()
        if cluster is not None:
            cluster.close()
    wall = time.perf_counter() - start
    if run.algorithm == "search":  # its iterations are its trials'
        ends = list(algo.ends)
        result["iteration"] = len(ends)
    gaps = [b - a for a, b in zip([start, *ends], ends, strict=False)]
    return {
        "cell": f"{run.name} / {fault or 'no faults'}", "seed": seed, "ended": ended,
        "reached": error is None and bool(result) and bool(run.reached(result)),
        "env_steps": result.get("env_steps_sampled"), "wall_s": round(wall, 1),
        "iterations": result.get("iteration"), "longest_gap_s": round(max(gaps, default=0.0), 1),
        "after_second_s": round(start + wall - ends[1], 1) if len(ends) >= 2 else None,
        "faults": [stall(f, ends) for f in faults.done],
        "baseline": None if baseline is None
        else {k: baseline[k] for k in ("reached", "env_steps", "wall_s")},
        "error": error,
        "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip


def stall(fault: dict, ends: list) -> dict:
    """How long after the fault the next iterations took to end: the longest gap between
    iteration ends within ``STALL_WINDOW_S`` of it."""
    after = [e for e in ends if fault["at"] <= e <= fault["at"] + STALL_WINDOW_S]
    gaps = [b - a for a, b in zip([fault["at"], *after], after, strict=False)]
    return {"what": fault["what"], "stall_s": round(max(gaps), 1) if gaps else None}


def table(rows: list[dict]) -> str:
    """Markdown: one row per cell, its run without faults first."""
    out = [
        "| algorithm | fault | ended | reached | env steps | wall s | longest gap s | stall per fault, s |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        run, _, fault = r["cell"].partition(" / ")
        stalls = ", ".join(str(f["stall_s"]) for f in r["faults"]) or "-"
        steps = f"{r['env_steps']:,}" if r.get("env_steps") else "-"
        out.append(
            f"| {run} | {fault} | {'yes' if r['ended'] else '**no**'} | "
            f"{'yes' if r['reached'] else '**no** (failed)' if r.get('error') else '**no**'} | "
            f"{steps} | {r['wall_s']} | "
            f"{r['longest_gap_s']} | {stalls} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    runs = all_runs()
    parser.add_argument("--algorithms", nargs="*", default=["all"], help=f"of {sorted(runs)}")
    parser.add_argument("--faults", nargs="*", default=["one-kill"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--monkey-minutes", type=float, default=5.0)
    parser.add_argument(
        "--max-minutes", type=float, default=30.0, help="a run's cap without a baseline"
    )
    parser.add_argument(
        "--out", default="runs/bench-chaos",
        help="where the search cells' trials write (each cell's JSON line goes to stdout)",
    )  # fmt: skip
    parser.add_argument(
        "--table", type=Path,
        help="print the cells of this JSONL file (this script's stdout, kept) as a table",
    )  # fmt: skip
    args = parser.parse_args()
    if args.table and not args.table.is_file():
        parser.error(
            f"--table {args.table}: not a file; give the JSON lines this script printed, "
            "e.g. python bench/chaos.py ... > cells.jsonl, then --table cells.jsonl"
        )
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line]))
        return
    names = sorted(runs) if args.algorithms == ["all"] else args.algorithms
    for name in names:
        run = runs[name]
        baseline = None if args.no_baseline else cell(run, None, args.seed, None, args)
        if baseline is not None:
            print(json.dumps(baseline), flush=True)
        for fault in args.faults:
            print(json.dumps(cell(run, fault, args.seed, baseline, args)), flush=True)


if __name__ == "__main__":
    main()
