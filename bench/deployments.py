"""Start-up of each way a run reaches Dask, as a user waits for it: the whole
``hrl-tasks train ppo --env CartPole-v1 --stop-iters 1`` (two rollout workers),
timed from outside, exit included, against the embedded cluster in the same run.

Interleaved, ``--reps`` times each (the machine's speed drifts):

* ``embedded``: no option (the baseline);
* ``address``: ``--address`` to a scheduler with two workers already up (their
  start-up not counted: it is what that deployment saves);
* ``cluster_slurm``: ``--cluster slurm --jobs 2`` (dask-jobqueue submits the worker jobs);
* ``runner_slurm``: ``srun -n 4 --overcommit ... --runner slurm`` (its allocation
  included; ``sbatch --wait`` would add 10-30 s of polling the job's state);
* ``runner_mpi``: ``mpirun -n 4 ... --runner mpi``;
* ``runner_slurm_no_tls``, ``runner_mpi_no_tls``: the same with ``--no-tls`` (the
  runners' default is TLS with a certificate made for the run);
* ``gateway``: ``--gateway`` to a dask-gateway-server started here
  (`.ci/gateway-ci.sh`, local processes, TLS).

A way whose system is missing here (no SLURM controller, no mpirun, no gateway
server) is left out with the reason. Needs a SLURM controller for the SLURM
rows: ``bash .ci/slurm-ci.sh start; export SLURM_CONF=/tmp/slurm-ci/slurm.conf``.
Prints one JSON line: the median seconds of each and its ratio to ``embedded``.

    python bench/deployments.py --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-m", "hrl_tasks.cli", "train", "ppo", "--env", "CartPole-v1",
         "--stop-iters", "1", "--no-progress", "--num-workers", "2"]  # fmt: skip
GATEWAY_PORT = 18324


def timed(command: list[str], env: dict, cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])}... failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def slurm_up() -> str | None:
    if shutil.which("sinfo") is None:
        return "no SLURM here"
    found = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return None if found.returncode == 0 and found.stdout.strip() else "no SLURM controller"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="hrl-deploy-")
    env = dict(os.environ)
    skipped, commands, cleanup = {}, {}, []

    def out() -> list[str]:
        return ["--out", tempfile.mkdtemp(dir=work)]

    commands["embedded"] = lambda: TRAIN + out()
    scheduler = subprocess.Popen(["dask", "scheduler", "--port", "0", "--scheduler-file",
                                  f"{work}/sched.json", "--dashboard-address", ":0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    cleanup.append(scheduler.terminate)
    while not os.path.exists(f"{work}/sched.json"):
        time.sleep(0.1)
    for _ in range(2):
        worker = subprocess.Popen(["dask", "worker", "--scheduler-file", f"{work}/sched.json",
                                   "--nthreads", "1", "--resources", "CPU=1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        cleanup.append(worker.terminate)
    address = json.loads(Path(f"{work}/sched.json").read_text())["address"]
    commands["address"] = lambda: TRAIN + out() + ["--address", address]
    why = slurm_up()
    if why is None:
        commands["cluster_slurm"] = lambda: TRAIN + out() + [
            "--cluster", "slurm", "--jobs", "2", "--cluster-opt", "cores=1",
            "--cluster-opt", "memory=1GB", "--cluster-opt", f"log_directory={work}"]  # fmt: skip
        # srun as a user types it (an allocation of its own, waited for): `sbatch --wait`
        # would add its polling of the job's state, 10-30 s here.
        srun = ["srun", "--overcommit", "-n", "4", "--cpus-per-task=1", "--mem-per-cpu=1G"]
        commands["runner_slurm"] = lambda: [*srun, *TRAIN, *out(), "--runner", "slurm"]
        commands["runner_slurm_no_tls"] = lambda: [*commands["runner_slurm"](), "--no-tls"]
    else:
        skipped["cluster_slurm"] = skipped["runner_slurm"] = why
        skipped["runner_slurm_no_tls"] = why
    if shutil.which("mpirun"):
        commands["runner_mpi"] = lambda: ["mpirun", "--allow-run-as-root", "--oversubscribe",
                                          "-n", "4", *TRAIN, *out(), "--runner", "mpi"]  # fmt: skip
        commands["runner_mpi_no_tls"] = lambda: [*commands["runner_mpi"](), "--no-tls"]
    else:
        skipped["runner_mpi"] = skipped["runner_mpi_no_tls"] = "no mpirun"
    if shutil.which("dask-gateway-server"):
        genv = {**env, "GATEWAY_DIR": f"{work}/gateway", "GATEWAY_PORT": str(GATEWAY_PORT)}
        started = subprocess.run(["bash", str(ROOT / ".ci" / "gateway-ci.sh"), "start"],
                                 env=genv, capture_output=True, text=True, check=True)  # fmt: skip
        cleanup.append(lambda: subprocess.run(["bash", str(ROOT / ".ci" / "gateway-ci.sh"),
                                               "stop"], env=genv))  # fmt: skip
        for line in started.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value
        time.sleep(3)  # the proxy routes the API a moment after its health check
        commands["gateway"] = lambda: TRAIN + out() + ["--gateway"]
    else:
        skipped["gateway"] = "no dask-gateway-server"
    times: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for _ in range(args.reps):
            for name, make in commands.items():
                times[name].append(timed(make(), env, work))
    finally:
        for end in reversed(cleanup):
            end()
        shutil.rmtree(work, ignore_errors=True)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(json.dumps({
        "bench": "deployments", "reps": args.reps,
        "seconds": {name: round(s, 2) for name, s in median.items()},
        "ratio_to_embedded": {name: round(s / median["embedded"], 2) for name, s in median.items()},
        "skipped": skipped,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
