"""Hyper-parameter search on a Dask cluster: every trial is a task that builds its own algorithm.

The driver's loop, on one screen (`Search.run`)::

    while some trial is unfinished:
        start chunks of the trials that may run, while the cluster has room for them
        wait for a chunk to end (or for the next report)
        feed its results to the trial scheduler and carry out its decision
        (continue, stop, or exploit another trial's checkpoint); save the trial

A chunk (`run_chunk`) is a task. It builds the algorithm on the engine it runs on,
so its rollout workers are stateful workers nested on the same cluster; restores
the trial's state; trains to the scheduler's next decision point, a stop
condition, or ``checkpoint_interval_s`` seconds; and returns the results and the
state. The driver decides between chunks with the pure schedulers of
`hrl_tasks.search.schedulers`; a chunk lost with its worker is run again from the
state it started from, and a stopped search resumes from its output directory, whose
state file (`hrl_tasks.tuning.state_file`) holds the decisions and the trials.

What a trial holds while its chunk runs: ``trial_resources`` for the chunk's task
(which runs the learner) and the algorithm's ``rollout_worker_resources`` for each
remote rollout worker. A trial starts only when all of it fits in what the
workers declare, beside the trials already running (`fits`), so trials beyond the
cluster's room wait instead of oversubscribing it; one that could never fit
raises `ResourceError` before anything runs.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrl_tasks.run_dir import claim, remove_stale_writes
from hrl_tasks.search.samplers import Sampler, make_sampler
from hrl_tasks.search.schedulers import (
    CONTINUE,
    STOP,
    ASHAScheduler,
    Exploit,
    FIFOScheduler,
    PBTScheduler,
    TrialScheduler,
)
from hrl_tasks.search.space import Mode, SearchError, check_mode, is_domain
from hrl_tasks.search.state import from_json
from hrl_tasks.tuning.options import TuneOptions
from hrl_tasks.tuning.state_file import (
    STATE_FILE,
    check_resumable,
    decisions_state,
    read_search,
    read_state,
    write_search,
)

SCHEDULERS = ("fifo", "asha", "pbt")
DEFAULT_TRIAL_RESOURCES = {"CPU": 1}
"""What a trial's own task holds by default: one CPU slot, for its learner."""

PENDING, RUNNING, PAUSED = "PENDING", "RUNNING", "PAUSED"
TERMINATED, STOPPED, ERROR = "TERMINATED", "STOPPED", "ERROR"
ENDED = (TERMINATED, STOPPED, ERROR)
"""A trial's status: waiting for its first chunk, running one, between two; ended by a
stop condition (TERMINATED), by the trial scheduler (STOPPED), or by failures (ERROR)."""


# --- the chunk: runs in a task -------------------------------------------------------


def run_chunk(
    algorithm: str,
    config: dict,
    state: dict | None,
    until: int | None,
    stop: dict,
    seconds: float,
    time_attr: str = "iteration",
) -> dict:
    """Train one stretch of a trial; runs in a task (or in the driver, engine permitting).

    Builds ``algorithm`` with ``config`` on the current engine, loads ``state`` if
    given, and trains until its ``time_attr`` (``"iteration"`` or
    ``"env_steps_sampled"``) reaches ``until``, a ``stop`` condition holds, or
    ``seconds`` have passed (checked after each iteration).

    Returns:
        ``{"results": [metrics of each iteration], "state": the algorithm's state,
        "span": (start, end) in Unix seconds, "worker": where it ran}``.
    """
    from hrl_tasks.algorithms import get_algorithm, stop_reached
    from hrl_tasks.jsonable import jsonable
    from hrl_tasks.scheduler import current_engine

    started = time.time()
    algo = get_algorithm(algorithm)(config, engine=current_engine())
    try:
        if state is not None:
            algo.set_state(state)
        results = []
        start = time.monotonic()
        while True:
            result = algo.train()
            results.append(jsonable({k: v for k, v in result.items() if k != "engine"}))
            if until is not None and result.get(time_attr, 0) >= until:
                break
            if stop_reached(result, stop) or time.monotonic() - start >= seconds:
                break
        state = algo.get_state()
    finally:
        algo.stop()
    return {
        "results": results,
        "state": state,
        "span": (started, time.time()),
        "worker": where_this_runs(),
    }


def where_this_runs() -> str:
    """The address of the worker process running this, or ``"driver"``."""
    from hrl_tasks.scheduler.context import worker_address

    return worker_address() or "driver"


# --- admission: pure -----------------------------------------------------------------


def fits(bundles: Sequence[Sequence[Mapping[str, float]]], capacity: Mapping[str, Mapping]) -> bool:
    """Whether every request of every bundle can be held at once on the workers.

    Each request goes whole onto one worker (largest requests first, each onto the
    first worker with room); the requests of a bundle may go onto different workers.

    Args:
        bundles: per trial, its requests (its task's, then its rollout workers').
        capacity: per worker, what it declares.
    """
    free = {worker: dict(declared) for worker, declared in capacity.items()}
    requests = [r for bundle in bundles for r in bundle if r]
    for request in sorted(requests, key=lambda r: -sum(r.values())):
        worker = next(
            (
                w
                for w, room in free.items()
                if all(room.get(k, 0.0) >= v - 1e-9 for k, v in request.items())
            ),
            None,
        )
        if worker is None:
            return False
        for name, amount in request.items():
            free[worker][name] -= amount
    return True


# --- the driver's records ------------------------------------------------------------


@dataclass
class Trial:
    """One trial as the driver keeps it."""

    trial_id: str
    config: dict  # the searched keys (PBT changes them)
    status: str = PENDING
    last: dict = field(default_factory=dict)
    best: float | None = None
    iterations: int = 0
    env_steps: int = 0
    start_time: float | None = None
    end_time: float | None = None
    checkpoint: str | None = None  # its latest, relative to the search's output directory
    failures: int = 0
    error: str | None = None
    chunks: list = field(default_factory=list)  # (start, end, worker) of each chunk that ended
    state: Any = field(default=None, repr=False)  # the algorithm's state after its last chunk
    # (env steps, metric) per iteration; None once it is on disk only (`Search.curve`)
    curve: list | None = field(default_factory=list, repr=False)

    def record(self) -> dict:
        """What the state file and trials.json keep of the trial (`located` under the
        output directory, what the result reports)."""
        return {
            "trial_id": self.trial_id,
            "config": dict(self.config),
            "last": dict(self.last),
            "best": self.best,
            "iterations": self.iterations,
            "env_steps": self.env_steps,
            "status": self.status,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "checkpoint": self.checkpoint,
            "failures": self.failures,
            "error": self.error,
            "chunks": [list(c) for c in self.chunks],
        }


def record_text(record: Mapping[str, Any]) -> bytes:
    """A trial's record as its line of the state file and trials.json (numpy values as
    plain JSON)."""
    return json.dumps(record, default=plain).encode()


def plain(value: Any) -> Any:
    """``value`` as JSON holds it, for numpy's numbers and arrays (a ``choice`` of
    numpy values); `json.dumps`'s ``default``."""
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"a trial's record holds {value!r} ({type(value).__name__}), not JSON")


class EndedTrial:
    """An ended trial as the driver keeps it: its record as one JSON string (what
    trials.json holds of it), not as the dicts and lists of a `Trial`. A long search
    ends many thousands of trials; a few kB of objects each grew its driver without
    bound. Reads what the live table shows (status, best, config, last) as a `Trial`
    does; state and curve are on disk (its checkpoint, its metrics.jsonl)."""

    __slots__ = ("trial_id", "status", "best", "iterations", "env_steps", "text")
    state = curve = None

    def __init__(self, record: Mapping[str, Any]):
        self.trial_id, self.status, self.best = record["trial_id"], record["status"], record["best"]
        self.iterations, self.env_steps = record["iterations"], record["env_steps"]
        self.text = record_text(record)

    def record(self) -> dict:
        """What the state file and trials.json keep of the trial (`located` under the
        output directory, what the result reports)."""
        return json.loads(self.text)

    @property
    def config(self) -> dict:
        return self.record()["config"]

    @property
    def last(self) -> dict:
        return self.record()["last"]


@dataclass
class TuneResult:
    """What `tune` returns: every trial, and the best one by ``metric`` and ``mode``.
    Each trial's ``config`` holds its searched keys; ``fixed`` the keys all shared."""

    trials: list[dict]
    metric: str
    mode: Mode
    out: Path | None = None
    fixed: dict = field(default_factory=dict)

    @property
    def best_trial(self) -> dict | None:
        """The trial whose best value of the metric is the best (None if no trial has one)."""
        scored = [t for t in self.trials if t["best"] is not None and not math.isnan(t["best"])]
        if not scored:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        return max(scored, key=lambda t: sign * t["best"])

    @property
    def best_config(self) -> dict | None:
        """The best trial's whole config, the fixed keys and its searched ones: what
        `hrl_tasks.train` takes to train it again."""
        best = self.best_trial
        return None if best is None else {**self.fixed, **best["config"]}

    @property
    def best_checkpoint(self) -> str | None:
        """The best trial's latest checkpoint file, a path under ``out`` (None without it)."""
        best = self.best_trial
        return None if best is None else best["checkpoint"]


def make_scheduler(
    scheduler: str | TrialScheduler,
    space: Mapping[str, Any],
    stop: Mapping[str, Any],
    mode: Mode,
    seed: int | None,
) -> TrialScheduler:
    """The trial scheduler called ``scheduler``, with defaults taken from ``stop``.

    ASHA judges in the units of `scheduler_budget` up to its budget, first after a
    sixteenth of it; PBT takes a step every tenth of it. Pass a `TrialScheduler` for
    other settings.
    """
    if isinstance(scheduler, TrialScheduler):
        return scheduler
    max_t = scheduler_budget(stop)[1]
    if scheduler == "fifo":
        return FIFOScheduler()
    if scheduler == "asha":
        return ASHAScheduler(max_t=max_t, grace_period=max(1, max_t // 16), mode=mode)
    if scheduler == "pbt":
        return PBTScheduler(space, perturbation_interval=max(1, max_t // 10), mode=mode, seed=seed)
    raise SearchError(f"unknown scheduler {scheduler!r}; available: {', '.join(SCHEDULERS)}")


def scheduler_budget(stop: Mapping[str, Any]) -> tuple[str, int]:
    """What trial schedulers count a trial's progress in, and its budget there: the
    iterations of ``stop["iteration"]``; else the env steps of
    ``stop["env_steps_sampled"]`` (``--stop-steps``); else 100 iterations. Pure."""
    if "iteration" in stop or "env_steps_sampled" not in stop:
        return "iteration", int(stop.get("iteration", 100))
    return "env_steps_sampled", int(stop["env_steps_sampled"])


# --- the search ----------------------------------------------------------------------


class Search:
    """The driver of one search: trials, their chunks, and what is written to ``out``."""

    def __init__(
        self,
        algorithm: str,
        config: dict,
        sampler: Sampler,
        scheduler: TrialScheduler,
        *,
        metric: str,
        mode: Mode,
        stop: dict,
        trial_resources: dict,
        max_concurrent: int | None,
        engine,
        out: Path | None,
        checkpoint_interval_s: float,
        max_failures: int,
        reporter: Callable[[Search], None] | None,
        time_attr: str = "iteration",
    ):
        self.algorithm, self.config = algorithm, config
        self.sampler, self.scheduler = sampler, scheduler
        self.metric, self.mode, self.stop = metric, mode, stop
        self.engine, self.out = engine, out
        self.trial_resources, self.max_concurrent = trial_resources, max_concurrent
        self.checkpoint_interval_s, self.max_failures = checkpoint_interval_s, max_failures
        self.reporter = reporter
        self.time_attr = time_attr  # what the trial scheduler counts: iterations or env steps
        from hrl_tasks.algorithms import get_algorithm

        self.config_class = get_algorithm(algorithm).config_class
        self.trials: dict[str, Trial] = {}
        self.running: dict[Any, str] = {}  # chunk ref -> trial id
        self.boards: dict[str, Any] = {}  # trial id -> its TensorBoard run, while it runs
        self.exhausted = False  # the sampler proposed its last config

    # The loop ---------------------------------------------------------------------

    def run(self) -> TuneResult:
        try:
            while not (self.exhausted and all(t.status in ENDED for t in self.trials.values())):
                self.start_chunks()
                if not self.running:  # no room yet (workers still joining, or gone)
                    if self.reporter is not None:
                        self.reporter(self)
                    time.sleep(0.5)
                    continue
                done, _ = self.engine.wait(
                    list(self.running), timeout=5.0, return_when="FIRST_COMPLETED"
                )
                for ref in done:
                    self.chunk_ended(self.trials[self.running.pop(ref)], ref)
                if self.reporter is not None:
                    self.reporter(self)
        finally:  # interrupted: chunks still running are given up (their trials resume)
            for ref in self.running:
                ref.cancel()
            for board in self.boards.values():
                if board is not None:
                    board.close()
        self.write_summary()
        return self.result()

    def start_chunks(self) -> None:
        """Start a chunk for each paused trial, then new trials, while they fit."""
        while True:
            trial = next((t for t in self.trials.values() if t.status in (PENDING, PAUSED)), None)
            while trial is None and not self.exhausted:
                trial = self.new_trial()
                trial = trial if trial is not None and trial.status == PENDING else None
            if trial is None or not self.room_for(trial):
                return
            self.start_chunk(trial)

    def room_for(self, trial: Trial) -> bool:
        """Whether ``trial`` may start a chunk now, beside the running ones."""
        if self.max_concurrent is not None and len(self.running) >= self.max_concurrent:
            return False
        running = [self.bundle(self.trials[t].config) for t in self.running.values()]
        bundles = [*running, self.bundle(trial.config)]
        if not any(r for bundle in bundles for r in bundle):  # nothing held: one per slot
            return len(bundles) <= max(1, sum(self.engine.nthreads.values()))
        return fits(bundles, self.engine.capacity())

    def new_trial(self) -> Trial | None:
        trial_id = f"{len(self.trials):04d}"
        config = self.sampler.suggest(trial_id)
        if config is None:
            self.exhausted = True
            return None
        trial = Trial(trial_id, config)
        self.trials[trial_id] = trial
        self.scheduler.on_trial_add(trial_id, config)
        try:  # a drawn value the algorithm refuses ends the trial before it runs
            self.config_class.from_dict({**self.config, **config})
        except ValueError as exc:
            trial.error = str(exc)
            self.end(trial, ERROR)
        return trial

    def start_chunk(self, trial: Trial) -> None:
        until = self.scheduler.next_decision(trial.trial_id, self.elapsed(trial))
        # One name for every trial's chunks: the engine keeps durations, means and
        # counts per name (and its live page lists names), so a name per trial made a
        # group per trial, some 2.5 kB each in a long search's driver.
        ref = self.engine.submit(
            run_chunk,
            self.algorithm,
            {**self.config, **trial.config},
            trial.state,
            until,
            self.stop,
            self.checkpoint_interval_s,
            self.time_attr,
            resources=self.trial_resources or None,
            name="trial",
        )
        trial.status = RUNNING
        trial.start_time = trial.start_time or time.time()
        self.running[ref] = trial.trial_id

    # What a chunk's end decides ---------------------------------------------------------

    def chunk_ended(self, trial: Trial, ref) -> None:
        try:
            chunk = ref.result()
        except Exception as exc:  # the algorithm failed: again from its last state, or ends
            trial.failures += 1
            trial.error = f"{type(exc).__name__}: {exc}"
            self.end(trial, ERROR) if trial.failures > self.max_failures else self.pause(trial)
            return
        trial.chunks.append((*chunk["span"], chunk["worker"]))
        decision = CONTINUE
        for result in chunk["results"]:
            self.record(trial, result)
            decision = self.scheduler.on_result(
                trial.trial_id, self.elapsed(trial), self.value(result)
            )
            if decision != CONTINUE:
                break
        from hrl_tasks.algorithms import stop_reached

        trial.state = chunk["state"]
        trial.error = None
        finished = stop_reached(trial.last, self.stop)
        if isinstance(decision, Exploit) and not finished:  # no source until it trains on
            source = self.trials[decision.source]
            trial.state, trial.config = source.state, dict(decision.config)
            trial.iterations = int(source.state["iteration"])
            counters = source.state.get("flow", {}).get("counters", {})
            trial.env_steps = int(counters.get("env_steps_sampled", source.env_steps))
            self.scheduler.on_trial_restore(trial.trial_id, self.elapsed(trial))
            self.log(trial, {"exploit": decision.source, "config": trial.config})
            self.save_checkpoint(trial)
        else:
            self.save_checkpoint(trial)
            self.scheduler.on_checkpoint(trial.trial_id)
        if finished:
            self.end(trial, TERMINATED)
        elif decision == STOP:
            at_the_end = getattr(self.scheduler, "max_t", math.inf) <= self.elapsed(trial)
            self.end(trial, TERMINATED if at_the_end else STOPPED)
        else:
            self.pause(trial)

    def elapsed(self, trial: Trial) -> int:
        """How far ``trial`` has trained, in what the trial scheduler counts."""
        return trial.env_steps if self.time_attr == "env_steps_sampled" else trial.iterations

    def value(self, result: Mapping) -> float:
        value = result.get(self.metric)
        return math.nan if value is None else float(value)

    def record(self, trial: Trial, result: dict) -> None:
        trial.last = result
        trial.iterations = int(result["iteration"])
        trial.env_steps = int(result.get("env_steps_sampled", 0))
        value = self.value(result)
        trial.curve.append((trial.env_steps, value))
        sign = 1.0 if self.mode == "max" else -1.0
        if not math.isnan(value) and (trial.best is None or sign * value > sign * trial.best):
            trial.best = value
        self.log(trial, result)

    def pause(self, trial: Trial) -> None:
        trial.status = PAUSED
        self.save_trials()

    def end(self, trial: Trial, status: str) -> None:
        trial.status, trial.end_time = status, time.time()
        board = self.boards.pop(trial.trial_id, None)
        if board is not None:
            board.close()
        self.scheduler.on_trial_complete(trial.trial_id)
        self.sampler.observe(trial.trial_id, trial.config, trial.best)
        self.trials[trial.trial_id] = EndedTrial(trial.record())
        self.save_trials()

    def bundle(self, searched: Mapping[str, Any] | None = None) -> list[dict]:
        """What a trial with the ``searched`` keys holds: its task's request, then each of
        its rollout workers' (as many as the algorithm builds)."""
        import types

        from hrl_tasks.algorithms import get_algorithm

        config = self.config_class.from_dict({**self.config, **(searched or {})})
        workers = get_algorithm(self.algorithm).num_rollout_workers(
            types.SimpleNamespace(config=config)
        )
        per_worker = config.rollout_worker_resources or {}
        return [dict(self.trial_resources), *[dict(per_worker)] * int(workers)]

    def result(self) -> TuneResult:
        records = [located(t.record(), self.out) for t in self.trials.values()]
        return TuneResult(records, self.metric, self.mode, self.out, dict(self.config))

    # The output directory ----------------------------------------------------------------

    def trial_dir(self, trial: Trial) -> Path:
        return self.out / "trials" / trial.trial_id

    def log(self, trial: Trial, line: dict) -> None:
        """A line of the trial's metrics.jsonl, and its TensorBoard run's points."""
        if self.out is None:
            return
        self.trial_dir(trial).mkdir(parents=True, exist_ok=True)
        with (self.trial_dir(trial) / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
        if "iteration" in line:
            from hrl_tasks.tensorboard import metrics_writer

            if trial.trial_id not in self.boards:
                self.boards[trial.trial_id] = metrics_writer(
                    self.out / "tensorboard" / trial.trial_id
                )
            board = self.boards[trial.trial_id]
            if board is not None:
                board.write(line)

    def save_checkpoint(self, trial: Trial) -> None:
        if self.out is None:
            return
        from hrl_tasks.algorithms.checkpoint import prune_checkpoints, write_checkpoint

        directory = self.trial_dir(trial) / "checkpoints"
        path = write_checkpoint(directory / f"checkpoint-{trial.iterations:06d}.hrl", trial.state)
        prune_checkpoints(directory, keep=2)
        trial.checkpoint = path.relative_to(self.out).as_posix()

    def save_trials(self) -> None:
        """The search's state file, then trials.json (`write_search`), so that `resume`
        continues from here."""
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        # A trial a line; an ended trial's line is the text it keeps, not encoded again.
        lines = [
            t.text if isinstance(t, EndedTrial) else record_text(t.record())
            for t in self.trials.values()
        ]
        sampler, scheduler = self.sampler.to_state(), self.scheduler.to_state()
        decisions = decisions_state(sampler, scheduler, self.stop, self.time_attr, self.exhausted)
        write_search(self.out, decisions, lines)

    def write_summary(self) -> None:
        """results.csv (a row per trial) and curves.png (every trial's curve)."""
        if self.out is None:
            return
        self.save_trials()
        records = [t.record() for t in self.trials.values()]
        keys = sorted({k for r in records for k in r["config"]})
        with (self.out / "results.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                [
                    "trial_id",
                    "status",
                    "iterations",
                    "env_steps",
                    f"best {self.metric}",
                    f"last {self.metric}",
                    "start_time",
                    "end_time",
                    *keys,
                ]
            )
            for r in records:
                writer.writerow(
                    [
                        r["trial_id"],
                        r["status"],
                        r["iterations"],
                        r["env_steps"],
                        r["best"],
                        r["last"].get(self.metric),
                        r["start_time"],
                        r["end_time"],
                        *[r["config"].get(k) for k in keys],
                    ]
                )
        curves = {t.trial_id: self.curve(t) for t in self.trials.values()}
        plot_trials(
            self.trials.values(),
            curves,
            self.out / "curves.png",
            self.metric,
            threshold=self.stop.get(self.metric),
        )

    def curve(self, trial: Trial) -> list:
        """``trial``'s (env steps, metric) per iteration: kept here while it runs, read
        from its metrics.jsonl once it has ended (a search may run many thousands)."""
        if trial.curve is not None:
            return trial.curve
        metrics = self.trial_dir(trial) / "metrics.jsonl"
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        results = [r for r in map(json.loads, lines) if "iteration" in r]
        return [(r.get("env_steps_sampled", 0), self.value(r)) for r in results]

    @classmethod
    def resume(cls, out: Path, **kwargs) -> Search:
        """The search saved in ``out``: ended trials stay ended, the others continue from
        their latest checkpoint, and the sampler and scheduler as they were."""
        from hrl_tasks.algorithms.checkpoint import read_checkpoint

        decisions, records = read_search(out)
        remove_stale_writes(out)  # of a process that died mid-write
        search = cls(
            sampler=decisions["sampler"],
            scheduler=decisions["scheduler"],
            out=out,
            time_attr=decisions["time_attr"],
            **kwargs,
        )
        search.exhausted = decisions["exhausted"]
        for record in records:
            if record["status"] in ENDED:
                search.trials[record["trial_id"]] = EndedTrial(record)
                continue
            fields = {k: v for k, v in record.items() if k in Trial.__dataclass_fields__}
            trial = Trial(**fields, curve=None)
            trial.curve = search.curve(trial)
            trial.status = PAUSED if trial.checkpoint else PENDING
            remove_stale_writes(search.trial_dir(trial) / "checkpoints")
            trial.state = read_checkpoint(out / trial.checkpoint) if trial.checkpoint else None
            search.trials[trial.trial_id] = trial
        return search


def located(record: dict, out: Path | None) -> dict:
    """A trial's record with its checkpoint as a path under ``out`` (the record names it
    relative to ``out``), as `TuneResult` reports it. Pure."""
    if out is None or record["checkpoint"] is None:
        return record
    return {**record, "checkpoint": str(Path(out) / record["checkpoint"])}


def check_search(algorithm: str, config: Mapping[str, Any], space: Mapping[str, Any]) -> None:
    """Fail now, before any cluster, on an unknown algorithm, a key it lacks (in ``config``
    or ``space``), or a fixed value it refuses.

    Raises:
        ConfigError: naming the key, with the closest ones the algorithm has.
    """
    from hrl_tasks.algorithms import get_algorithm

    config_class = get_algorithm(algorithm).config_class
    config_class.from_dict({**config, **{k: v for k, v in space.items() if not is_domain(v)}})
    unknown = sorted(set(space) - set(config_class.__dataclass_fields__))
    if unknown:
        config_class.from_dict({k: None for k in unknown})  # names them, with suggestions


def with_table(reporter: Callable[[Search], None] | None):
    """A reporter that shows the live table, then calls ``reporter``."""
    from hrl_tasks.tuning.report import TrialTable

    table = TrialTable()

    def report(search: Search) -> None:
        table(search)
        if reporter is not None:
            reporter(search)

    report.table = table
    return report


def plot_trials(
    trials, curves: Mapping[str, list], path: Path, metric: str, threshold: float | None = None
) -> Path:
    """Every trial's metric against env steps (``curves`` by trial id), one line per
    trial, in one PNG."""
    from hrl_tasks.plotting import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(7, 4), dpi=110)
    for trial in trials:
        points = [(x, y) for x, y in curves[trial.trial_id] if not math.isnan(y)]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, label=f"{trial.trial_id} ({trial.status.lower()})")
    if threshold is not None and not isinstance(threshold, tuple):
        ax.axhline(threshold, linestyle="--", color="grey", label=f"target {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric)
    return save_figure(fig, ax, path, f"{len(list(trials))} trials", legend_outside=True)


# --- the entry point -------------------------------------------------------------------


def tune(
    algorithm: str,
    env: Any = None,
    space: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    engine=None,
    **options,
) -> TuneResult:
    """Search ``space`` for the config of ``algorithm`` that does best on ``env``: each
    trial a task that builds its own algorithm on ``engine`` (default: an embedded
    cluster) and trains it in chunks, the trial scheduler deciding between chunks.

    Args: ``algorithm`` (a name of ``hrl_tasks.algorithms.ALGORITHMS``), ``env`` (an env
    spec, `hrl_tasks.envs.make`; or ``config["env"]``), ``space`` (keys to search, each a
    domain of `hrl_tasks.search` or a constant), ``config`` (the fixed keys), and the
    ``options`` of `TuneOptions` (``num_samples``, ``scheduler``, ``stop``, ``out``...;
    an ``out`` that holds another run's files is refused unless ``resume`` or ``force``).
    Returns a `TuneResult` (``trials``, ``best_config``, ``best_checkpoint``). Raises
    ``ConfigError`` or ``SearchError`` for a bad config, space, sampler or scheduler
    before any cluster starts, ``ResourceError`` if a trial could never fit. Example::

        result = hrl_tasks.tune("ppo", env="CartPole-v1", space={"lr": loguniform(1e-4, 1e-2)},
                                scheduler="asha", stop={"episode_return_mean": 450})
    """
    from hrl_tasks.scheduler import Engine

    opts, space = TuneOptions.from_keywords(options), dict(space or {})
    settings = search_settings(algorithm, fixed_config(config, env), space, opts)
    if settings["out"] is not None and not opts.resume:  # before any cluster starts
        claim(settings["out"], settings["out"], force=opts.force, resume_hint="resume=True")
    decisions = {} if opts.resume else new_decisions(space, settings["stop"], opts)
    own_engine, engine = engine is None, engine or Engine.local()
    try:
        begin = Search.resume if opts.resume else Search
        search = begin(engine=engine, out=settings.pop("out"), **decisions, **settings)
        return run_search(search, opts.verbose)
    finally:
        if own_engine:
            engine.close()


def search_settings(algorithm: str, config: dict, space: dict, opts: TuneOptions) -> dict:
    """What every search takes, new or resumed (as `Search` takes it), checked before any
    cluster starts.

    Raises:
        ConfigError: for a key or value the algorithm refuses, in ``config`` or ``space``.
        SearchError: for a bad mode, or ``resume`` with nothing saved in ``out``.
    """
    check_mode(opts.mode)
    stop = trial_stop(opts.stop, opts.out, opts.resume)
    check_search(algorithm, config, space)
    trial_resources = trial_request(opts.trial_resources)
    out = None if opts.out is None else Path(opts.out)
    if opts.resume:
        check_resumable(out)
    return dict(
        algorithm=algorithm,
        config=config,
        metric=opts.metric,
        mode=opts.mode,
        stop=stop,
        trial_resources=trial_resources,
        out=out,
        max_concurrent=opts.max_concurrent,
        max_failures=opts.max_failures,
        checkpoint_interval_s=opts.checkpoint_interval_s,
        reporter=with_table(opts.reporter) if opts.verbose else opts.reporter,
    )


def fixed_config(config: Mapping[str, Any] | None, env: Any) -> dict:
    """The config keys every trial shares: ``config``, with ``env`` as its env if given."""
    config = dict(config or {})
    if env is not None:
        config["env"] = env
    return config


def trial_stop(stop: Mapping[str, Any] | None, out: str | Path | None, resume: bool) -> dict:
    """Each trial's stop conditions: ``stop``; none given when resuming, those of the
    search saved in ``out``; else 10 iterations."""
    if resume and not stop and out is not None and (Path(out) / STATE_FILE).exists():
        stop = from_json(read_state(Path(out))["stop"])  # the saved search's, unless given anew
    return dict(stop or {"iteration": 10})


def trial_request(trial_resources: Mapping[str, float] | None) -> dict:
    """What each trial's own task holds, checked: ``trial_resources``, by default
    `DEFAULT_TRIAL_RESOURCES`."""
    from hrl_tasks.scheduler.resources import normalize_request

    return normalize_request(
        DEFAULT_TRIAL_RESOURCES if trial_resources is None else trial_resources
    )


def new_decisions(space: Mapping[str, Any], stop: Mapping[str, Any], opts: TuneOptions) -> dict:
    """What a new search decides with, as `Search` takes them: its ``sampler``, its trial
    ``scheduler``, and the units that scheduler counts (``time_attr``).

    Raises:
        SearchError: for an unknown sampler or scheduler, or a bad space.
    """
    sampler = make_sampler(opts.sampler, space, opts.num_samples, opts.seed, opts.metric, opts.mode)
    scheduler = make_scheduler(opts.scheduler, space, stop, opts.mode, opts.seed)
    # A scheduler given as an object counts iterations, whatever the stop conditions.
    time_attr = scheduler_budget(stop)[0] if isinstance(opts.scheduler, str) else "iteration"
    return {"sampler": sampler, "scheduler": scheduler, "time_attr": time_attr}


def run_search(search: Search, verbose: bool) -> TuneResult:
    """Refuse a search whose trials could never fit, save it before its first trial
    starts (so that it can resume), run it, and show the final table (``verbose``)."""
    check_trial_fits(search)
    if search.out is not None:
        search.out.mkdir(parents=True, exist_ok=True)
        search.save_trials()
    result = search.run()
    if verbose:
        search.reporter.table(search)  # the final table, unless it is already shown
    return result


def check_trial_fits(search: Search) -> None:
    """Raise `ResourceError` if one trial of ``search`` fits in no arrangement of the
    engine's workers (not checked while they declare nothing)."""
    from hrl_tasks.scheduler import ResourceError
    from hrl_tasks.scheduler.resources import describe

    capacity = search.engine.capacity()
    if capacity and not fits([search.bundle()], capacity):
        wanted = " + ".join(str(r) for r in search.bundle() if r) or "{}"
        raise ResourceError(
            f"one trial holds {wanted} (trial_resources, then rollout_worker_resources "
            f"for each of its rollout workers), which no arrangement of the workers fits:"
            f"\n{describe(capacity)}\nAsk for less, or start bigger workers."
        )
