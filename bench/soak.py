"""Memory soak: resident memory of the driver and of every worker process over a long run.

Runs ``hrl-tasks train ALGO --env CartPole-v1 --stop-time SECONDS --no-progress
--out TMPDIR`` (PPO, IMPALA, Ape-X) or, for ``search``, ``hrl-tasks tune ppo --env
CartPole-v1`` with trials of 20,000 env steps, one after another for the whole run
(each trial a task that trains its own PPO), on the embedded cluster, as a user would (``python -m
hrl_tasks.cli``, the console script's entry point, with this checkout first on
``PYTHONPATH``), and samples from outside the resident set size (RSS) of the
driver and of each of its descendant processes (the Dask worker processes)
every ``--interval`` seconds. The training time (``--stop-time``) is set to the
whole run, so the driver still trains (or searches) when sampling stops; it is then
interrupted (its ``KeyboardInterrupt`` path stops the cluster), and the final
learning-curve plot, which would add its own memory, is never drawn.

Per process, the slope of a linear fit of RSS against time over the samples
after the warm-up, in MB per 10 minutes. Target: every slope <= 1 MB per 10
minutes. Prints one JSON line per algorithm: the slopes (and the slope over the
second half of the fitted samples, which tells a one-off step, such as a table
that doubled once, from steady growth), RSS at the end of the warm-up and at the
end, the iterations and env steps trained, and what the run wrote to disk
(checkpoints every ``--checkpoint-every`` iterations, 10 by default as in the
CLI, which keeps the 5 newest), and per process its threads at the end and how
many distinct thread ids the samples saw (more than at the end: threads come and
go), and where its RSS was at the end of the warm-up and at the end (the brk heap,
anonymous mappings, files). With ``--plot``, RSS over time per process, one column
per algorithm; with ``--samples``, every sample as JSON, with where the RSS was
and the process's threads.

    python bench/soak.py [--algorithm ppo|impala|apex|search|both|all] [--minutes 30] [--warmup-minutes 5] \
        [--interval 10] [--checkpoint-every 10] [--set KEY=VALUE] [--plot docs/images/soak.png] [--samples soak.json]
"""

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
TARGET_MB_PER_10_MIN = 1.0
STOP_GRACE_S = 60  # for the interrupted driver to stop its cluster


RUNS = {
    "ppo": ["train", "ppo"],
    "impala": ["train", "impala"],
    "apex": ["train", "apex"],
    # trials of 20,000 env steps one after another, each a task that trains its own PPO
    "search": [
        "tune", "ppo", "--space", "lr=loguniform(1e-4,1e-2)", "--samples", "100000",
        "--stop-steps", "20000",
    ],
}  # fmt: skip


def launch(
    algorithm: str, seconds: float, out: Path, checkpoint_every: int, settings: list[str]
) -> subprocess.Popen:
    """The driver process: ``hrl-tasks train`` (``tune`` for the search) writing its run
    to ``out/run`` (a directory of its own: the CLI refuses one holding other files)
    and its output to ``out/driver.log``; ``settings`` are ``KEY=VALUE`` config keys
    (``--set``)."""
    command = RUNS[algorithm]
    training = ["--stop-time", str(seconds), "--no-progress", "--checkpoint-every",
                str(checkpoint_every)] if command[0] == "train" else []  # fmt: skip
    cmd = [
        sys.executable, "-m", "hrl_tasks.cli", *command, "--env", "CartPole-v1",
        "--out", str(out / "run"), *training, *(arg for item in settings for arg in ("--set", item)),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    log = (out / "driver.log").open("w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out)


def role(proc: psutil.Process) -> str:
    """What a descendant of the driver is, from its command line."""
    try:
        cmdline = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    if "resource_tracker" in cmdline:
        return "resource-tracker"
    if "spawn_main" in cmdline or "forkserver" in cmdline:
        return "worker"
    return proc.name()


def where(proc: psutil.Process) -> dict:
    """Resident MB by kind of mapping: the brk heap (glibc's main arena), anonymous
    mappings (other arenas, blocks mapped on their own, Python's arenas, thread
    stacks) and files (code, mapped files)."""
    kinds = {"heap": 0.0, "anon": 0.0, "file": 0.0}
    for region in proc.memory_maps(grouped=True):
        path = region.path
        kind = (
            "heap" if path == "[heap]" else "anon" if not path or path.startswith("[") else "file"
        )
        kinds[kind] += region.rss / 2**20
    return kinds


def sample(driver: psutil.Process, series: dict, t: float) -> None:
    """Append ``(t, RSS in MB)`` to the series of the driver and of each descendant,
    with where the RSS is (`where`) and the process's threads; note the ids of its
    threads (how many distinct ones were seen tells thread churn)."""
    try:
        procs = [driver, *driver.children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        try:
            rss = proc.memory_info().rss / 2**20
            threads = {thread.id for thread in proc.threads()}
            kinds = where(proc)
        except psutil.Error:
            continue
        if proc.pid not in series:
            kind = "driver" if proc is driver else role(proc)
            n = sum(1 for s in series.values() if s["role"] == kind)
            name = kind if kind == "driver" else f"{kind}-{n + 1}"
            series[proc.pid] = {"role": kind, "name": name, "t": [], "rss": [], "tids": set(),
                                "kinds": [], "thread_counts": []}  # fmt: skip
        series[proc.pid]["t"].append(t)
        series[proc.pid]["rss"].append(rss)
        series[proc.pid]["kinds"].append({k: round(v, 2) for k, v in kinds.items()})
        series[proc.pid]["thread_counts"].append(len(threads))
        series[proc.pid]["threads"] = len(threads)
        series[proc.pid]["tids"] |= threads


def stop(proc: subprocess.Popen) -> None:
    """Interrupt the driver (it stops its cluster), then end whatever of it is left."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE_S)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for child in family:
        with contextlib.suppress(psutil.Error):
            child.kill()


def progress(out: Path) -> dict:
    """Iterations and env steps: the last line of ``metrics.jsonl``, or for a search
    the sums over its trials' (and how many trials reported)."""
    paths = [out / "metrics.jsonl"] if (out / "metrics.jsonl").exists() else sorted(
        (out / "trials").glob("*/metrics.jsonl"))  # fmt: skip
    done = {"iterations": 0, "env_steps": 0}
    for path in paths:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        if lines:
            metrics = json.loads(lines[-1])
            done["iterations"] += metrics["iteration"]
            done["env_steps"] += metrics["env_steps_sampled"]
    if (out / "trials").exists():
        done["trials"] = len(paths)
    return done


def slope_per_10_min(t_s: list, rss_mb: list) -> float | None:
    """MB per 10 minutes of a least-squares line through the samples."""
    if len(t_s) < 3:
        return None
    return float(np.polyfit(np.asarray(t_s) / 600.0, np.asarray(rss_mb), 1)[0])


def soak(
    algorithm: str,
    minutes: float,
    warmup_minutes: float,
    interval: float,
    checkpoint_every: int,
    settings: list[str],
) -> dict:
    """One run; returns its figures and the sampled series."""
    seconds = minutes * 60
    with tempfile.TemporaryDirectory(prefix=f"soak-{algorithm}-") as tmp:
        out = Path(tmp)
        proc = launch(algorithm, seconds, out, checkpoint_every, settings)
        driver = psutil.Process(proc.pid)
        series: dict = {}
        start = time.monotonic()
        try:
            while (t := time.monotonic() - start) < seconds and proc.poll() is None:
                sample(driver, series, t)
                time.sleep(max(0.0, interval - (time.monotonic() - start - t)))
            exited = proc.poll()
            done = progress(out / "run")
            written = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
            done["out_dir_mb"] = round(written / 2**20, 1)
            done["checkpoints"] = len(list(out.rglob("checkpoints/*.hrl")))
        finally:
            stop(proc)
        if exited is not None:
            tail = (out / "driver.log").read_text()[-2000:]
            raise RuntimeError(f"{algorithm}: the driver exited early ({exited}):\n{tail}")
    warmup_s = warmup_minutes * 60
    processes = {}
    for s in series.values():
        kept = [(t, r) for t, r in zip(s["t"], s["rss"], strict=True) if t >= warmup_s]
        t_kept, rss_kept = zip(*kept, strict=True) if kept else ((), ())
        slope = slope_per_10_min(t_kept, rss_kept)
        half = len(kept) // 2
        late = slope_per_10_min(t_kept[half:], rss_kept[half:])
        processes[s["name"]] = {
            "slope_mb_per_10_min": None if slope is None else round(slope, 2),
            "slope_last_half": None if late is None else round(late, 2),
            "rss_mb_after_warmup": round(rss_kept[0], 1) if kept else None,
            "rss_mb_end": round(s["rss"][-1], 1),
            "rss_mb_first": round(s["rss"][0], 1),
            "threads_at_end": s["threads"],
            "thread_ids_seen": len(s["tids"]),
            "samples_fitted": len(kept),
            # where the RSS was at the end of the warm-up and at the end (see `where`)
            "mb_by_kind": {
                k: [round(s["kinds"][len(s["t"]) - len(kept)][k], 1) if kept else None,
                    round(s["kinds"][-1][k], 1)]
                for k in s["kinds"][-1]
            },
        }  # fmt: skip
    slopes = [p["slope_mb_per_10_min"] for p in processes.values()]
    slopes = [s for s in slopes if s is not None]
    figures = {
        "bench": "soak",
        "algorithm": algorithm,
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "minutes": minutes,
        "warmup_minutes": warmup_minutes,
        "interval_s": interval,
        "checkpoint_every": checkpoint_every,
        "settings": settings,
        **done,
        "target_mb_per_10_min": TARGET_MB_PER_10_MIN,
        "max_slope_mb_per_10_min": max(slopes) if slopes else None,
        "within_target": bool(slopes) and max(slopes) <= TARGET_MB_PER_10_MIN,
        "processes": processes,
    }
    return {"figures": figures, "series": series}


def plot(runs: dict, warmup_minutes: float, path: Path) -> None:
    """RSS over time per process, one column per algorithm: the RSS itself above, its
    change since the end of the warm-up below (where a slope of 1 MB per 10 minutes shows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        2, len(runs), figsize=(6.5 * len(runs), 7.5), squeeze=False, sharex="col"
    )
    for column, (algorithm, run) in enumerate(runs.items()):
        top, bottom = axes[0][column], axes[1][column]
        for s in run["series"].values():
            found = run["figures"]["processes"][s["name"]]
            slope, base = found["slope_mb_per_10_min"], found["rss_mb_after_warmup"]
            label = s["name"] if slope is None else f"{s['name']} ({slope:+.2f} MB/10 min)"
            minutes = np.asarray(s["t"]) / 60
            (line,) = top.plot(minutes, s["rss"], label=label)
            if base is not None:
                after = minutes >= warmup_minutes
                rss = np.asarray(s["rss"])
                bottom.plot(minutes[after], rss[after] - base, color=line.get_color())
        for ax in (top, bottom):
            ax.axvline(warmup_minutes, color="grey", linestyle=":")
        top.set_title(f"{algorithm} on CartPole-v1, {run['figures']['iterations']} iterations")
        top.set_ylabel("RSS (MB)")
        top.legend(fontsize=8)
        bottom.set_ylabel("change since the end of the warm-up (MB)")
        bottom.set_xlabel("minutes (dotted: end of the warm-up)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--algorithm", choices=[*RUNS, "both", "all"], default="both",
        help="both: ppo and impala; all: every one",
    )  # fmt: skip
    parser.add_argument("--minutes", type=float, default=30, help="length of each run")
    parser.add_argument(
        "--warmup-minutes", type=float, default=5, help="samples before this are not fitted"
    )
    parser.add_argument("--interval", type=float, default=10, help="seconds between samples")
    parser.add_argument(
        "--checkpoint-every", type=int, default=10, help="iterations between checkpoints"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
        help="a config key of the algorithm, as hrl-tasks train --set (repeatable)",
    )  # fmt: skip
    parser.add_argument("--plot", type=Path, help="write RSS over time here (PNG)")
    parser.add_argument("--samples", type=Path, help="write every sample here (JSON)")
    args = parser.parse_args()
    if args.warmup_minutes >= args.minutes:
        parser.error("--warmup-minutes must be less than --minutes")
    algorithms = {"both": ["ppo", "impala"], "all": list(RUNS)}.get(
        args.algorithm, [args.algorithm]
    )
    runs = {}
    for algorithm in algorithms:  # one after the other: one training process at a time
        runs[algorithm] = soak(
            algorithm, args.minutes, args.warmup_minutes, args.interval,
            args.checkpoint_every, args.settings,
        )  # fmt: skip
        print(json.dumps(runs[algorithm]["figures"]), flush=True)
    if args.plot is not None:
        plot(runs, args.warmup_minutes, args.plot)
    if args.samples is not None:
        samples = {
            algorithm: {
                s["name"]: {
                    "t_s": s["t"],
                    "rss_mb": s["rss"],
                    "mb_by_kind": s["kinds"],
                    "threads": s["thread_counts"],
                }
                for s in run["series"].values()
            }
            for algorithm, run in runs.items()
        }
        args.samples.write_text(json.dumps(samples))


if __name__ == "__main__":
    main()
