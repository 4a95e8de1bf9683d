"""Compare two checkouts of this project on one bench script, runs interleaved.

This machine's speed drifts 1.5-2x within hours, so two benchmark runs made at
different times do not compare. This runs ``bench/<script>`` of the old and the
new checkout alternately (old, new, old, new, ...; ``--runs`` pairs), each run
a fresh ``python bench/<script> args...`` with cwd = that checkout and the
checkout prepended to ``PYTHONPATH`` (so that its own ``hrl_tasks`` is imported;
checked once per checkout before the runs). Each bench script prints one JSON
line as its last stdout line; every numeric field of it (nested dicts and lists
flattened to dotted keys), and each run's wall time (``wall_s``), is collected.

Prints a table (metric, old median, new median, new/old, the single values) and
then one JSON line with the same figures. Every run's raw output, and that
summary as the last line, go to a JSON-lines file (``--out``, default
``runs/interleave-<script>-<timestamp>.jsonl`` in this checkout; ``runs/`` is
git-ignored). Run at most one of these at a time, on a quiet machine.

    python bench/interleave.py --old /work/baseline --new . [--runs 3] [--out FILE] \\
        -- engine_overhead.py --rounds 200
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def checkout_env(checkout: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    return env


def check_import(python: str, checkout: Path) -> str:
    """The hrl_tasks a run in this checkout imports; exits if it is not the checkout's own."""
    out = subprocess.run(
        [python, "-c", "import hrl_tasks; print(hrl_tasks.__file__)"],
        cwd=checkout,
        env=checkout_env(checkout),
        capture_output=True,
        text=True,
    )
    path = out.stdout.strip()
    if out.returncode != 0 or not Path(path).resolve().is_relative_to(checkout):
        sys.exit(f"{checkout}: hrl_tasks imported from {path!r}\n{out.stderr[-2000:]}")
    return path


def git_commit(checkout: Path) -> str:
    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=checkout, capture_output=True, text=True
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def flatten(value, prefix="") -> dict:
    """Numeric leaves of a JSON value, keyed by dotted paths (booleans left out)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: value}
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {}
    out = {}
    for key, item in items:
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def run_once(python: str, checkout: Path, script: str, args: list[str]) -> dict:
    cmd = [python, f"bench/{script}", *args]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=checkout, env=checkout_env(checkout), capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    result, error = None, None
    if proc.returncode != 0:
        error = f"exit code {proc.returncode}"
    else:
        try:
            result = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            error = "last stdout line is not JSON"
    return {
        "cmd": cmd,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "wall_s": round(wall, 2),
        "returncode": proc.returncode,
        "error": error,
        "result": result,
        "stdout": proc.stdout if error else None,
        "stderr_tail": proc.stderr[-4000:],
    }


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def main():
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    own, bench = argv[:split], argv[split + 1 :]  # this tool's options, then the bench's
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--old", type=Path, required=True, help="the reference checkout")
    parser.add_argument("--new", type=Path, required=True, help="the checkout to compare")
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs (old, new)")
    parser.add_argument("--out", type=Path, help="JSON-lines file for the raw runs")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the runs")
    args = parser.parse_args(own)
    if not bench:
        parser.error("give the bench after '--': -- engine_overhead.py [its arguments]")
    script, bench_args = bench[0], bench[1:]
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    for side, checkout in sides.items():
        if not (checkout / "bench" / script).is_file():
            parser.error(f"--{side}: no {checkout / 'bench' / script}")
    out = (
        args.out
        or HERE / "runs" / f"interleave-{Path(script).stem}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    )
    out.parent.mkdir(parents=True, exist_ok=True)

    info = {}
    for side, checkout in sides.items():
        info[side] = {
            "checkout": str(checkout),
            "commit": git_commit(checkout),
            "hrl_tasks": check_import(args.python, checkout),
        }
        print(
            f"{side}: {checkout} ({info[side]['commit']}), hrl_tasks from {info[side]['hrl_tasks']}"
        )
    print(
        f"{args.runs} pairs of: bench/{script} {' '.join(bench_args)}; raw runs to {out}",
        flush=True,
    )

    values = {"old": [], "new": []}  # one flattened dict per successful run
    failures = 0
    with out.open("a") as raw:
        for i in range(args.runs):
            for side, checkout in sides.items():
                record = run_once(args.python, checkout, script, bench_args)
                record = {"kind": "run", "pair": i, "side": side, **info[side], **record}
                raw.write(json.dumps(record) + "\n")
                raw.flush()
                status = record["error"] or "ok"
                print(
                    f"  pair {i + 1}/{args.runs} {side}: {record['wall_s']:.1f} s, {status}",
                    flush=True,
                )
                if record["error"]:
                    failures += 1
                    print(record["stderr_tail"][-1500:], file=sys.stderr)
                    continue
                values[side].append({**flatten(record["result"]), "wall_s": record["wall_s"]})

        names = list(
            dict.fromkeys(k for side in ("old", "new") for run in values[side] for k in run)
        )
        metrics = {}
        for name in names:
            old = [run[name] for run in values["old"] if name in run]
            new = [run[name] for run in values["new"] if name in run]
            old_med = statistics.median(old) if old else None
            new_med = statistics.median(new) if new else None
            ratio = round(new_med / old_med, 4) if old_med and new_med is not None else None
            metrics[name] = {
                "old_median": old_med,
                "new_median": new_med,
                "new_over_old": ratio,
                "old": old,
                "new": new,
            }
        summary = {
            "kind": "summary",
            "bench": "interleave",
            "script": script,
            "args": bench_args,
            "runs": args.runs,
            "failures": failures,
            "old": info["old"],
            "new": info["new"],
            "metrics": metrics,
        }
        raw.write(json.dumps(summary) + "\n")

    width = max([len("metric"), *map(len, metrics)])
    print(
        f"\n{'metric':<{width}}  {'old med':>10}  {'new med':>10}  {'new/old':>7}  old values | new values"
    )
    for name, m in metrics.items():
        print(
            f"{name:<{width}}  {fmt(m['old_median']):>10}  {fmt(m['new_median']):>10}  "
            f"{fmt(m['new_over_old']):>7}  {' '.join(map(fmt, m['old']))} | {' '.join(map(fmt, m['new']))}"
        )
    print(json.dumps(summary))
    if failures:
        sys.exit(f"{failures} run(s) failed; see {out}")


if __name__ == "__main__":
    main()
