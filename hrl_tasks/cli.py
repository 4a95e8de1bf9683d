"""The ``hrl-tasks`` command: train an algorithm on the embedded cluster or an existing one.

Examples::

    hrl-tasks train ppo --env CartPole-v1 --stop-reward 450 --out runs/ppo
    hrl-tasks train ppo --resume runs/ppo --stop-steps 200000
    hrl-tasks train a3c --env CartPole-v1 --address tcp://scheduler:8786
    hrl-tasks train ppo --env Pendulum-v1 --set lr=3e-4 --set num_sgd_iter=10
    hrl-tasks tune ppo --env CartPole-v1 --space 'lr=loguniform(1e-4,1e-2)' --scheduler asha
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import logging
import os
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from hrl_tasks.algorithms.config import AlgorithmConfig

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    from hrl_tasks.registry import ALGORITHM_PATHS as ALGORITHMS

    parser = argparse.ArgumentParser(
        prog="hrl-tasks",
        description="Distributed reinforcement learning on Dask.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train",
        help="train an algorithm",
        description=(
            "Train an algorithm until a stop condition holds, with a progress bar. Writes "
            "metrics.jsonl, learning_curve.png and checkpoints into --out, and TensorBoard "
            "event files into --out/tensorboard when tensorboard is installed.\n\n"
            f"Algorithms: {', '.join(sorted(ALGORITHMS))}. Their config keys: "
            "hrl-tasks keys ALGO."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "algorithm",
        nargs="?",
        choices=sorted(ALGORITHMS),
        help="the algorithm to train (optional with --config, whose file names it)",
    )
    train.add_argument(
        "--config",
        type=Path,
        metavar="EXPERIMENT.py",
        help="a Python file defining `experiment`, a dict with algorithm, env, config, "
        "stop and, for multi-agent envs, policies, policy_mapping_fn and policies_to_train "
        "(code, which the command line cannot hold); options given here override it",
    )
    add_run_options(train)
    train.add_argument(
        "--out",
        type=Path,
        help="directory for metrics, curve and checkpoints, which must hold no other run's "
        "files (default: the first free of runs/ALGO-ENV, runs/ALGO-ENV-2, ...)",
    )
    train.add_argument("--resume", type=Path, help="continue the run saved in this directory")
    train.add_argument(
        "--force",
        action="store_true",
        help="if --out holds another run's files, move them aside to OUT.old-TIME "
        "(never deleted) instead of refusing",
    )
    train.add_argument(
        "--checkpoint-every", type=count(1), default=10, help="iterations between checkpoints"
    )
    train.add_argument(
        "--keep-checkpoints",
        type=count(0),
        default=5,
        metavar="N",
        help="keep the N newest checkpoints of the run, delete older ones (0: keep all)",
    )
    train.add_argument(
        "--no-progress", action="store_true", help="print one line per iteration instead of a bar"
    )
    tune = commands.add_parser(
        "tune",
        help="search an algorithm's hyper-parameters",
        description=(
            "Search hyper-parameters: every trial is a task that trains its own algorithm on "
            "the same cluster, started while the cluster has room for what it holds "
            "(--trial-resources for its learner, rollout_worker_resources for each rollout "
            "worker). Shows a live table; writes per-trial metrics.jsonl and checkpoints, "
            "trials.json, results.csv and curves.png into --out.\n\n"
            "Domains for --space: uniform(a,b), loguniform(a,b), randint(a,b), "
            "choice(x,y,...), grid(x,y,...).\n\n"
            "Example:\n  hrl-tasks tune ppo --env CartPole-v1 --space 'lr=loguniform(1e-4,1e-2)' "
            "--space 'clip=choice(0.1,0.2,0.3)' --samples 8 --scheduler asha --stop-reward 450 "
            "--stop-steps 200000 --out runs/search"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tune.add_argument("algorithm", choices=sorted(ALGORITHMS), help="the algorithm to tune")
    tune.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KEY=DOMAIN",
        help="a searched config key, e.g. --space 'lr=loguniform(1e-4,1e-2)' (repeatable)",
    )
    add_run_options(tune)
    tune.add_argument("--samples", type=count(1), default=8, help="trials (grid: its repeats)")
    tune.add_argument(
        "--scheduler",
        choices=("fifo", "asha", "pbt"),
        default="fifo",
        help="trial scheduler (default fifo)",
    )
    tune.add_argument(
        "--sampler",
        choices=("random", "grid", "optuna"),
        default="random",
        help="how configs are drawn (optuna: TPE, needs optuna)",
    )
    tune.add_argument("--metric", default="episode_return_mean", help="the metric to optimize")
    tune.add_argument("--mode", choices=("max", "min"), default="max")
    tune.add_argument(
        "--trial-resources",
        action="append",
        default=[],
        metavar="NAME=AMOUNT",
        help="what each trial's own task holds (default CPU=1; repeatable; CPU=0 for none)",
    )
    tune.add_argument("--max-concurrent", type=count(1), help="at most this many trials at once")
    tune.add_argument(
        "--out",
        type=Path,
        help="output directory, which must hold no other run's files (default: the first free "
        "of runs/tune-ALGO-ENV, runs/tune-ALGO-ENV-2, ...; with --resume, runs/tune-ALGO-ENV)",
    )
    tune.add_argument("--resume", action="store_true", help="continue the search saved in --out")
    tune.add_argument(
        "--force",
        action="store_true",
        help="if --out holds another run's files, move them aside to OUT.old-TIME "
        "(never deleted) instead of refusing",
    )
    keys = commands.add_parser("keys", help="list an algorithm's config keys and defaults")
    keys.add_argument("algorithm", choices=sorted(ALGORITHMS))
    return parser


def add_run_options(command: argparse.ArgumentParser) -> None:
    """The options ``train`` and ``tune`` share: env, stop conditions, config, cluster."""
    command.add_argument(
        "--env",
        help="gymnasium id (CartPole-v1), PettingZoo game (connect_four_v3) or module:Id "
        "(default: the algorithm's)",
    )
    command.add_argument(
        "--stop-reward", type=float, help="stop when the mean episode return reaches this"
    )
    command.add_argument("--stop-steps", type=int, help="stop after this many env steps in all")
    command.add_argument(
        "--stop-time",
        type=float,
        help="stop after this many seconds of training; an iteration still waiting on the "
        "cluster 5 s past it is cut short (the last checkpoint stays the last)",
    )
    command.add_argument("--stop-iters", type=int, help="stop after this many iterations")
    command.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="stop when a reported metric reaches VALUE, e.g. --stop win_rate/random=0.95, or "
        "falls to it with <=, e.g. --stop 'loss_rate/minimax<=0' (repeatable; any condition "
        "ends the run)",
    )
    command.add_argument(
        "--verbose",
        action="store_true",
        help="print the engine's settings before the run, each with where it came from "
        "(the hrl-tasks section of Dask's configuration: ~/.config/dask/*.yaml, "
        "DASK_HRL_TASKS__* variables, or the shipped defaults)",
    )
    where = command.add_mutually_exclusive_group()
    where.add_argument(
        "--address", help="scheduler address of an existing Dask cluster (default: start one here)"
    )
    where.add_argument(
        "--cluster",
        choices=("slurm", "pbs", "sge", "lsf"),
        help="submit worker jobs to this batch system through dask-jobqueue (only slurm is "
        "tested here); settings not given by --cluster-opt come from Dask's configuration "
        "(jobqueue.<system> in ~/.config/dask/jobqueue.yaml)",
    )
    where.add_argument(
        "--gateway",
        nargs="?",
        const="",
        metavar="URL",
        help="ask this Dask Gateway for a cluster for the run, shut down at its end (URL "
        "left out: gateway.address of Dask's configuration); credentials come from Dask's "
        "configuration (gateway.auth, DASK_GATEWAY__AUTH__...), never from the command line",
    )
    where.add_argument(
        "--runner",
        choices=("slurm", "mpi"),
        help="every process of the run inside one allocation, started by its launcher: "
        "`srun hrl-tasks train ... --runner slurm` or `mpirun -n 4 hrl-tasks train ... "
        "--runner mpi`; rank 0 runs the scheduler, rank 1 the run, the others are workers",
    )
    command.add_argument(
        "--ports",
        metavar="LOW:HIGH",
        help="with --runner: take the scheduler's, dashboards' and workers' ports from this "
        "range (default: any free port)",
    )
    command.add_argument(
        "--interface",
        metavar="NAME",
        help="with --runner: the network interface every rank listens on, e.g. ib0 "
        "(default: the one that reaches the scheduler's rank; printed at start)",
    )
    command.add_argument(
        "--no-tls",
        action="store_true",
        help="with --runner: plain TCP instead of TLS with a certificate made for the run "
        "(anyone who can reach the run's nodes could then run code as you)",
    )
    command.add_argument("--tls-ca-file", help="with a tls:// --address: the cluster's CA")
    command.add_argument("--tls-cert", help="with a tls:// --address: this client's certificate")
    command.add_argument("--tls-key", help="with a tls:// --address: this client's private key")
    command.add_argument(
        "--upload",
        action="store_true",
        help="with --address: copy this hrl_tasks to workers that lack it (its dependencies "
        "must be there)",
    )
    command.add_argument(
        "--wait-for-jobs",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --cluster or --gateway: how long to wait for the workers to start (default 600)",
    )
    command.add_argument(
        "--gateway-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --gateway: a cluster option the gateway offers, e.g. worker_cores=2 "
        "(repeatable; one it does not offer fails, naming those it does)",
    )
    command.add_argument(
        "--adapt",
        metavar="MIN:MAX",
        help="with --gateway: scale between MIN and MAX workers with the run's own work (its "
        "queued and running tasks and its rollout workers); default: the workers the run "
        "needs, fixed",
    )
    command.add_argument(
        "--keep-cluster",
        action="store_true",
        help="with --gateway: leave the cluster running at the end (its name is printed)",
    )
    command.add_argument(
        "--jobs",
        type=count(1),
        default=2,
        help="with --cluster: worker jobs to submit (default 2), each split into worker "
        "processes as dask-jobqueue does (--cluster-opt processes=N sets it; 1 with cores=1)",
    )
    command.add_argument(
        "--cluster-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --cluster: a dask-jobqueue option, e.g. cores=4, memory=8GB, "
        "walltime=01:00:00, queue=gpu, account=proj, security=temporary (repeatable)",
    )
    command.add_argument(
        "--resources",
        action="append",
        default=[],
        metavar="NAME=AMOUNT",
        help="with --cluster: what each worker process declares besides its CPU slots, "
        "e.g. GPU=1 (repeatable); rollout_worker_resources and --trial-resources use them",
    )
    command.add_argument(
        "--num-workers",
        type=int,
        help="remote rollout workers (alphazero, mpc: worker processes for their tasks)",
    )
    command.add_argument("--seed", type=int, help="seed of envs, weights and sampling")
    command.add_argument(
        "--record",
        metavar="DIR",
        help="write every step the rollout workers sample as Parquet files under DIR, a "
        "path or an fsspec URL such as s3://bucket/run (record_experience; --out stays the "
        "run's directory)",
    )
    command.add_argument(
        "--train-from",
        metavar="DIR",
        help="learn from experience recorded under DIR (a directory, glob or file; a path or "
        "fsspec URL; experience_input): bc, marwil and cql from it alone, dqn, sac and td3 "
        "beside their workers' samples (experience_mix); without --env, the recording's env",
    )
    command.add_argument(
        "--trust-env-modules",
        action="store_true",
        help="accept an env id taken from a file (--resume's checkpoint, --train-from's "
        "recording) that imports a module no installed distribution provides, such as "
        "mymodule:MyEnv-v0 with mymodule.py in the working directory: importing runs its "
        "code, so only for files you trust (an --env given is never checked)",
    )
    command.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set lr=3e-4 (repeatable; see `hrl-tasks keys ALGO`)",
    )


def count(minimum: int):
    """An argparse type: an int of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "count"
    return parse


def parse_value(text: str):
    """``3e-4`` -> float, ``[64, 64]`` -> list, ``true`` -> True, else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def pairs(items: list[str], option: str, number: bool = False) -> dict:
    """``KEY=VALUE`` items as a dict (values parsed as `parse_value`, or floats)."""
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} needs KEY=VALUE, got {item!r}")
        if number:
            try:
                found[key.strip()] = float(value)
            except ValueError:
                raise ValueError(f"{option} {item!r}: {value!r} is not a number") from None
        else:
            found[key.strip()] = parse_value(value)
    return found


def check_cluster_options(args) -> None:
    """Options that go with one way of reaching a cluster fail without it.

    Raises:
        ValueError: naming the options and the one they go with.
    """
    if args.cluster is None and (args.cluster_opt or args.resources):
        raise ValueError("--cluster-opt and --resources go with --cluster")
    if args.runner is None and (args.ports or args.interface or args.no_tls):
        raise ValueError("--ports, --interface and --no-tls go with --runner")
    if args.ports:
        low, sep, high = args.ports.partition(":")
        if not (low.isdigit() and (not sep or high.isdigit())):
            raise ValueError(
                f"--ports takes LOW:HIGH port numbers, e.g. 40000:40100; got {args.ports!r}"
            )
    if args.gateway is None and (args.gateway_opt or args.adapt or args.keep_cluster):
        raise ValueError("--gateway-opt, --adapt and --keep-cluster go with --gateway")
    if args.adapt:
        from hrl_tasks.scheduler.adaptive import parse_bounds

        parse_bounds(args.adapt)
    pairs(args.gateway_opt, "--gateway-opt")


def print_settings() -> None:
    """``--verbose``: the engine's settings, each with where it came from."""
    from hrl_tasks.scheduler.settings import report

    print("engine settings (dask.config's hrl-tasks section):")
    for key, value, origin in report():
        print(f"  {key}: {'null' if value is None else value}  ({origin})")


def engine_from_args(args, embedded: dict | None, workers: int = 2, run_dir: Path | None = None):
    """The engine that ``--address``, ``--cluster``, ``--gateway`` or ``--runner`` name;
    else an embedded cluster started with ``Engine.local(**embedded)``, or None when
    ``embedded`` is None (the run needs no cluster).
    ``workers``: how many worker processes the run needs (a gateway's cluster size);
    ``run_dir``: the run's directory (a runner's scheduler file and scratch space)."""
    from hrl_tasks.scheduler import Engine

    check_cluster_options(args)
    if args.verbose:
        print_settings()
    if args.gateway is not None:
        return gateway_engine(args, workers)
    if args.runner is not None:
        return runner_engine(args, run_dir or Path("runs") / "runner")
    tls = {
        "tls_ca_file": args.tls_ca_file,
        "tls_client_cert": args.tls_cert,
        "tls_client_key": args.tls_key,
    }
    if (any(tls.values()) or args.upload) and not args.address:
        raise ValueError("--tls-ca-file, --tls-cert, --tls-key and --upload go with --address")
    if args.address:
        from hrl_tasks.scheduler.clusters import tls_security

        security = tls_security(*tls.values()) if any(tls.values()) else None
        return Engine.connect(args.address, security=security, upload=args.upload)
    if args.cluster is None:
        return None if embedded is None else Engine.local(**embedded)
    from hrl_tasks.scheduler.clusters import job_ids, worker_processes

    options = pairs(args.cluster_opt, "--cluster-opt")
    if run_dir is not None and not dask_setting(f"jobqueue.{args.cluster}.log-directory"):
        # The worker jobs' output in the run's directory, not slurm-N.out files in the
        # current one (where several runs' would mix).
        options.setdefault("log_directory", str(run_dir / "worker-logs"))
    resources = pairs(args.resources, "--resources", number=True)
    engine = Engine.batch(args.cluster, args.jobs, options, resources)
    try:
        wanted = args.jobs * worker_processes(engine.cluster)
        print(
            f"submitted {args.jobs} {args.cluster} worker jobs; waiting for {wanted} "
            f"worker processes",
            flush=True,
        )
        engine.wait_for_workers(wanted, timeout=args.wait_for_jobs)
        print(f"worker jobs: {', '.join(job_ids(engine.cluster)) or '(none listed)'}", flush=True)
    except TimeoutError:
        ids = ", ".join(job_ids(engine.cluster))
        engine.close()
        raise TimeoutError(
            f"the {args.cluster} worker jobs ({ids}) did not all start within "
            f"{args.wait_for_jobs:g} s; see their state with squeue/qstat, or wait longer "
            f"with --wait-for-jobs"
        ) from None
    except BaseException:
        engine.close()
        raise
    return engine


def dask_setting(key: str):
    """A value of Dask's configuration, None if unset."""
    import dask

    return dask.config.get(key, None)


def gateway_engine(args, workers: int):
    """The engine on a new cluster of ``--gateway``, sized ``workers`` or ``--adapt``."""
    from hrl_tasks.scheduler import Engine
    from hrl_tasks.scheduler.adaptive import parse_bounds

    bounds = parse_bounds(args.adapt) if args.adapt else None
    print(
        f"asking the gateway {args.gateway or '(from Dask configuration)'} for a cluster of "
        + (f"{bounds.minimum} to {bounds.maximum}" if bounds else str(workers))
        + " workers",
        flush=True,
    )
    engine = Engine.from_gateway(
        args.gateway or None,
        workers=workers,
        adapt=bounds,
        options=pairs(args.gateway_opt, "--gateway-opt"),
        keep=args.keep_cluster,
        timeout=args.wait_for_jobs,
    )
    kept = " (kept after the run)" if args.keep_cluster else ""
    print(f"gateway cluster: {engine.cluster.name}{kept}", flush=True)
    return engine


def runner_engine(args, run_dir: Path):
    """The engine of a run whose every process its launcher started (``--runner``): on
    the scheduler and worker ranks this serves until the run ends, then exits; on the
    driver rank it returns the engine, which ends the other ranks when it closes."""
    from hrl_tasks.scheduler import Engine
    from hrl_tasks.scheduler.runner_network import interface_of
    from hrl_tasks.scheduler.runners import end_on_lost_rank, forget_decision, join_allocation

    allocation = join_allocation(
        args.runner, run_dir, ports=args.ports, interface=args.interface, tls=not args.no_tls
    )
    try:
        engine = Engine.connect(allocation.address, security=allocation.security)
    except BaseException:
        allocation.close()
        raise
    engine.own_cluster(allocation)  # closing the engine ends the scheduler and the workers
    engine.runner = args.runner  # every process is the run's, on its interface
    try:
        engine.wait_for_workers(allocation.workers, timeout=args.wait_for_jobs)
    except BaseException:
        engine.close()
        raise
    forget_decision(args.runner, run_dir.parent)  # every rank has joined, so has read them
    forget_decision(args.runner, run_dir, "network")
    if args.runner == "mpi":
        end_on_lost_rank(engine, run_dir)
    tls = "TLS with a certificate made for this run" if allocation.security else "plain TCP"
    host = allocation.address.partition("://")[2].rpartition(":")[0]
    print(
        f"{args.runner} runner: scheduler {allocation.address} ({tls}) on "
        f"{interface_of(host) or host}, {allocation.workers} worker ranks",
        flush=True,
    )
    return engine


def workers_needed(config) -> int:
    """Worker processes a run with ``config`` (an algorithm's parsed config) keeps busy:
    its rollout workers (or the processes its tasks run in), at least one. Pure."""
    return max(1, int(config.num_workers))


EXPERIMENT_KEYS = (
    "algorithm",
    "env",
    "config",
    "stop",
    "policies",
    "policy_mapping_fn",
    "policies_to_train",
)
MULTI_AGENT_KEYS = ("env", "policies", "policy_mapping_fn", "policies_to_train")


def read_experiment(path: Path) -> dict:
    """The ``experiment`` dict of a Python file (see ``train --config``), checked by key.

    Raises:
        ValueError: for a missing file, no ``experiment`` dict, or an unknown key.
    """
    import runpy

    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    try:
        experiment = runpy.run_path(str(path), run_name="hrl_tasks_experiment").get("experiment")
    except Exception as exc:  # the file's own error, in one line
        raise ValueError(f"--config {path} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(experiment, dict):
        raise ValueError(
            f"--config {path} must define `experiment`, a dict with keys such as "
            f"{', '.join(EXPERIMENT_KEYS)}"
        )
    unknown = sorted(set(experiment) - set(EXPERIMENT_KEYS))
    if unknown:
        raise ValueError(
            f"--config {path}: `experiment` has unknown keys {unknown}; allowed: "
            f"{', '.join(EXPERIMENT_KEYS)}"
        )
    for key in ("config", "stop"):
        if not isinstance(experiment.get(key) or {}, dict):
            raise ValueError(
                f"--config {path}: experiment[{key!r}] must be a dict, got {experiment[key]!r}"
            )
    return experiment


def experiment_config(experiment: dict) -> dict:
    """The algorithm config an ``experiment`` dict holds (its ``config`` and its
    multi-agent keys)."""
    config = dict(experiment.get("config") or {})
    config.update({key: experiment[key] for key in MULTI_AGENT_KEYS if key in experiment})
    return config


def config_from_args(args) -> dict:
    config = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set needs KEY=VALUE, got {item!r}")
        config[key.strip()] = parse_value(value)
    given = (
        ("env", args.env),
        ("num_workers", args.num_workers),
        ("seed", args.seed),
        ("record_experience", getattr(args, "record", None)),
        ("experience_input", getattr(args, "train_from", None)),
    )
    for key, value in given:
        if value is not None:
            config[key] = value
    if "experience_input" in config and "env" not in config:  # the recording's own env
        from hrl_tasks.data.experience import recorded_env
        from hrl_tasks.envs.make import check_env_from_file

        env = recorded_env(config["experience_input"])
        check_env_from_file(env, config["experience_input"], args.trust_env_modules)
        if env is not None:
            config["env"] = env
    return config


def stop_conditions(args, experiment_stop: dict | None = None, default: dict | None = None):
    """The run's stop conditions: the options', over those of ``--config``'s ``stop``;
    none given: ``default`` (100 iterations unless said)."""
    stop = {
        "episode_return_mean": args.stop_reward,
        "env_steps_sampled": args.stop_steps,
        "time_total_s": args.stop_time,
        "iteration": args.stop_iters,
    }
    stop = {**(experiment_stop or {}), **{k: v for k, v in stop.items() if v is not None}}
    for item in args.stop:
        stop.update(parse_stop(item))
    return stop or ({"iteration": 100} if default is None else default)


def parse_stop(item: str) -> dict:
    """``win_rate/random=0.95`` or ``>=``: at least; ``loss_rate/minimax<=0``: at most."""
    for op in ("<=", ">=", "="):
        key, sep, value = item.partition(op)
        if sep:
            try:
                number = float(value)
            except ValueError:
                break
            if key.strip():
                return {key.strip(): number if op != "<=" else ("<=", number)}
            break
    raise ValueError(
        f"--stop needs METRIC=NUMBER (at least) or METRIC<=NUMBER (at most), e.g. "
        f"win_rate/random=0.95; got {item!r}"
    )


def import_in_background(algorithm: str) -> Future:
    """Import ``algorithm``'s class (its plan, and torch) in a daemon thread, while the
    driver starts its cluster and waits for the worker processes (a one-iteration run
    took 0.4-0.5 s less here); returns a future of the class."""
    algo_class: Future = Future()

    def load() -> None:
        from hrl_tasks.registry import get_algorithm

        try:
            algo_class.set_result(get_algorithm(algorithm))
        except BaseException as exc:  # noqa: BLE001 - raised again where the class is used
            algo_class.set_exception(exc)

    threading.Thread(target=load, name="hrl-tasks-imports", daemon=True).start()
    return algo_class


class TrainSetup(NamedTuple):
    """What ``hrl-tasks train`` runs, decided before any cluster starts (a NamedTuple:
    ``dataclasses`` would add its import to every ``--help``)."""

    algorithm: str
    checked: AlgorithmConfig  # the config, parsed and checked by the algorithm's class
    config: dict
    checkpoint: dict | None  # the state of the run resumed, if any
    out: Path
    experiment_stop: dict | None  # the stop conditions of ``--config``'s file


def run_train(args) -> int:
    """``hrl-tasks train``: decide the run (a bad config or a used ``--out`` fails before
    any cluster), build the algorithm, train it until a stop condition holds, then save
    the last checkpoint and the curve. However it ends, also on Ctrl-C, the TensorBoard
    writer, the algorithm and the engine are closed."""
    from hrl_tasks.algorithms.run_files import RunFiles
    from hrl_tasks.plotting import CurveProcess
    from hrl_tasks.tensorboard import metrics_writer

    check_cluster_options(args)  # a usage error before anything is decided or written
    setup = take_run_dir(plan_train(args), args)
    with contextlib.closing(CurveProcess()) as curve:  # it imports matplotlib beside the run
        if args.runner is None:  # every --runner rank gets here; the driver's starts it below
            curve.start()
        algo_class = import_in_background(setup.algorithm)  # while the cluster starts
        embedded, workers = setup.checked.embedded_cluster(), workers_needed(setup.checked)
        engine = engine_from_args(args, embedded, run_dir=setup.out, workers=workers)
        curve.start()  # under --runner, only the driver's rank returns here
        algo = build_algorithm(setup, algo_class, engine)  # closes the engine if it fails
        board = None
        try:
            start_run(algo, setup)
            stop = stop_conditions(args, setup.experiment_stop)
            steps = algo.ctx.counters["env_steps_sampled"]
            progress = Progress(stop, args.no_progress, base_steps=steps)
            board = metrics_writer(setup.out / "tensorboard")  # None without tensorboard
            files = RunFiles(setup.out, args.checkpoint_every, args.keep_checkpoints)
            with files, progress as bar:
                result, cut_short = train_until_stop(algo, stop, files, bar, board)
            finish_run(algo, setup, result, files, args, cut_short, curve)
        finally:
            if board is not None:  # also on Ctrl-C: its last events are written at close
                board.close()
            algo.stop()
            if engine is not None:
                engine.close()
    return 0


def plan_train(args) -> TrainSetup:
    """The run the options and ``--config`` describe, over the config of the run that
    ``--resume`` continues; the config is checked here, before any connection.

    Raises:
        ValueError: for a bad experiment file, ``--set``, no algorithm named, or a
            config the algorithm refuses.
    """
    from hrl_tasks.algorithms.checkpoint import read_checkpoint
    from hrl_tasks.registry import get_config_class

    experiment = read_experiment(args.config) if args.config is not None else {}
    config = {**experiment_config(experiment), **config_from_args(args)}
    checkpoint = None
    if args.resume is not None:
        from hrl_tasks.algorithms.checkpoint import latest_checkpoint
        from hrl_tasks.envs.make import check_env_from_file

        path = latest_checkpoint(args.resume / "checkpoints", run_only=True)
        checkpoint = read_checkpoint(path)
        if "env" not in config:  # the env the checkpoint names
            check_env_from_file(checkpoint["config"].get("env"), path, args.trust_env_modules)
        config = {**checkpoint["config"], **config}
    algorithm = args.algorithm or experiment.get("algorithm")
    if algorithm is None:
        raise ValueError("name the algorithm: hrl-tasks train ALGO, or `algorithm` in --config")
    out = args.out or args.resume
    # A bad config fails here, before any connection (for most algorithms, without torch).
    checked = get_config_class(algorithm).from_dict(config)
    return TrainSetup(algorithm, checked, config, checkpoint, out, experiment.get("stop"))


def take_run_dir(setup: TrainSetup, args) -> TrainSetup:
    """``setup`` with the directory its run writes to, taken: ``--resume``'s own, else
    ``--out`` if it holds no other run's files (``--force`` moves them aside), else the
    first free of ``runs/ALGO-ENV``, ``runs/ALGO-ENV-2``, ...

    Raises:
        RunDirError: if ``--out`` holds another run's files, without ``--force``.
    """
    if args.resume is not None and setup.out == args.resume:
        return setup
    default = Path("runs") / f"{setup.algorithm}-{env_label({'env': setup.checked.env})}"
    return setup._replace(out=claim_run_dir(args, setup.out, default))


def claim_run_dir(args, out: Path | None, default: Path) -> Path:
    """`hrl_tasks.run_dir.claim` for this command; under ``--runner``, where every rank
    runs it, taken once by the scheduler's rank and read by the others."""
    from hrl_tasks.run_dir import claim

    def decide() -> str:
        taken, aside = claim(out, default, force=args.force)
        if aside is not None:
            print(f"moved the earlier run's files in {taken} to {aside}", flush=True)
        return str(taken)

    if args.runner is None:
        return Path(decide())
    from hrl_tasks.scheduler.runners import decided_once

    return Path(decided_once(args.runner, (out or default).parent, decide))


def env_label(config: dict) -> str:
    """The env's part of a run's default folder: its id, one folder deep
    (``ALE/Breakout-v5`` -> ``ALE-Breakout-v5``), or ``env`` when not a string. Pure."""
    label = config.get("env", "env") if isinstance(config.get("env", "env"), str) else "env"
    return label.replace("/", "-").replace(":", "-")


def build_algorithm(setup: TrainSetup, algo_class: Future, engine):
    """The algorithm of ``setup``, of the class ``algo_class`` is to hold, on ``engine``
    (None: it runs without a cluster); ``engine`` is closed if the algorithm fails to
    import or build."""
    try:
        return algo_class.result()(setup.checked, engine=engine)  # parsed once, in plan_train
    except BaseException:
        if engine is not None:
            engine.close()
        raise


def start_run(algo, setup: TrainSetup) -> None:
    """Restore the state of the run resumed, say where to watch and where it writes."""
    if setup.checkpoint is not None:
        algo.set_state(setup.checkpoint)
    print(f"dashboard: {algo.engine.dashboard_link}", flush=True)
    print(f"engine page: {algo.engine.page_link}", flush=True)
    print(f"writing to {setup.out}/", flush=True)


def train_until_stop(algo, stop: dict, files, bar, board) -> tuple[dict | None, bool]:
    """Train until a ``stop`` condition holds; returns the last iteration's result, and
    whether the time stop cut an iteration short (its waits on the engine are bounded:
    `hrl_tasks.algorithms.time_limit`).

    Each iteration's metrics go to the run's ``files`` (metrics.jsonl, a checkpoint
    every ``--checkpoint-every`` iterations), to TensorBoard (``board``, if any) and to
    the progress ``bar``.

    Raises:
        ConfigError: after the first iteration, if ``stop`` names a metric not reported.
    """
    from hrl_tasks.algorithms import train_until
    from hrl_tasks.scheduler import DeadlineReached

    def show(result: dict) -> None:
        if board is not None:
            board.write(result)
        bar.update(result)

    try:
        return train_until(algo, stop, show, files)
    except DeadlineReached:  # the first iteration was cut short
        return None, True


def finish_run(
    algo, setup: TrainSetup, result: dict | None, files, args, cut_short: bool, curve
) -> None:
    """The run's last checkpoint and learning curve (drawn by ``curve``, a
    `hrl_tasks.plotting.CurveProcess`), and the line that sums it up.

    A run whose last iteration the time stop cut short saves no checkpoint of that
    iteration's state: the one of the last finished iteration, if any, stays the last.
    """
    from hrl_tasks.envs import env_name

    if cut_short:
        kept = files.last_checkpoint()
        print(
            f"--stop-time reached while iteration {algo.iteration + 1} waited on the cluster; "
            "it was cut short and not saved. "
            + (f"The last checkpoint is {kept}." if kept else "No checkpoint was saved."),
            flush=True,
        )
        if result is None:
            return
    else:
        files.save(algo, result["iteration"])
    path = setup.out / "learning_curve.png"
    title = f"{setup.algorithm} on {env_name(algo.config.env)}"
    curve.draw(setup.out / "metrics.jsonl", path, setup.algorithm, title, args.stop_reward)
    print(
        f"done: iteration {result['iteration']}, {result['env_steps_sampled']} env steps, "
        f"{headline(result)}, {result['time_total_s']:.1f} s; curve in {path}"
    )


def run_tune(args) -> int:
    from hrl_tasks.search.space import parse_space_item
    from hrl_tasks.tuning.runner import check_search, tune

    config = config_from_args(args)
    space = dict(parse_space_item(item) for item in args.space)
    resources = pairs(args.trial_resources, "--trial-resources", number=True)
    check_search(args.algorithm, config, space)  # bad input fails before a cluster starts
    check_cluster_options(args)
    out = take_search_dir(args, config)
    if args.resume:  # its state file, or one line naming what is missing (or how to convert)
        from hrl_tasks.tuning.state_file import check_resumable

        check_resumable(out)
    options = dict(
        space=space,
        config=config,
        num_samples=args.samples,
        scheduler=args.scheduler,
        sampler=args.sampler,
        metric=args.metric,
        mode=args.mode,
        stop=stop_conditions(args, default={}) or None,  # none: as saved, or tune's default
        trial_resources=resources or None,
        max_concurrent=args.max_concurrent,
        out=out,
        resume=args.resume,
        seed=0 if args.seed is None else args.seed,
    )
    engine = engine_from_args(args, {}, workers=tune_workers(args, config), run_dir=out)
    try:
        print(f"dashboard: {engine.dashboard_link}", flush=True)
        print(f"engine page: {engine.page_link}", flush=True)
        print(f"writing to {out}/", flush=True)
        result = tune(args.algorithm, engine=engine, **options)
    finally:
        engine.close()
    best = result.best_trial
    if best is None:
        print("done: no trial reported the metric")
        return 1
    print(
        f"done: best trial {best['trial_id']}, {args.metric} {best['best']:.4g}, "
        f"config {best['config']}; checkpoint {best['checkpoint']}; "
        f"table in {out / 'results.csv'}, curves in {out / 'curves.png'}"
    )
    return 0


def take_search_dir(args, config: dict) -> Path:
    """The directory a search writes to: ``--out``, or ``runs/tune-ALGO-ENV`` when
    resuming, else the first free of ``runs/tune-ALGO-ENV``, ``-2``, ...; a new search's
    taken before any cluster starts.

    Raises:
        RunDirError: if a new search's ``--out`` holds another run's files, without
            ``--force``.
    """
    default = Path("runs") / f"tune-{args.algorithm}-{env_label(config)}"
    if args.resume:
        return args.out or default
    return claim_run_dir(args, args.out, default)


def tune_workers(args, config: dict) -> int:
    """Worker processes a search keeps busy: each trial running at once (``--max-concurrent``,
    else every sample) with its rollout workers."""
    from hrl_tasks.registry import get_config_class

    per_trial = 1 + workers_needed(get_config_class(args.algorithm).from_dict(config))
    return per_trial * (args.max_concurrent or args.samples)


def headline(result: dict) -> str:
    """What a line about an iteration says of its quality: the mean return, or win rates."""
    rates = {k: v for k, v in result.items() if k.startswith("win_rate/")}
    if rates:
        return ", ".join(f"{k} {v:.2f}" for k, v in sorted(rates.items()))
    if "episode_return_mean" in result:
        return f"mean return {result['episode_return_mean']:.1f}"
    return "no evaluation yet"


class Progress:
    """A tqdm bar over the stop condition (env steps, time or iterations)."""

    def __init__(self, stop: dict, disabled: bool = False, base_steps: int = 0):
        from tqdm.auto import tqdm  # a widget in a notebook, a text bar in a terminal

        self.key, total = next(
            (
                (k, v)
                for k, v in stop.items()
                if k in ("env_steps_sampled", "time_total_s", "iteration")
            ),
            (None, None),
        )
        self.disabled = disabled
        self.bar = None if disabled else tqdm(total=total, unit=self._unit(), dynamic_ncols=True)
        self.start = time.perf_counter()
        self.base_steps = base_steps  # steps of a resumed run, not sampled by this process

    def _unit(self) -> str:
        return {"env_steps_sampled": "step", "time_total_s": "s", "iteration": "it"}.get(
            self.key, "it"
        )

    def update(self, result: dict) -> None:
        steps = result["env_steps_sampled"]
        rate = (steps - self.base_steps) / max(1e-9, time.perf_counter() - self.start)
        line = {
            "iter": result["iteration"],
            "steps": steps,
            "score": headline(result),
            "steps/s": f"{rate:.0f}",
        }
        if self.disabled:
            print("  ".join(f"{k}={v}" for k, v in line.items()), flush=True)
            return
        done = result.get(self.key, result["iteration"]) if self.key else result["iteration"]
        self.bar.n = min(done, self.bar.total) if self.bar.total else done
        self.bar.set_postfix(line, refresh=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


def run_keys(args) -> int:
    import dataclasses

    from hrl_tasks.algorithms.config import bounds_of
    from hrl_tasks.registry import get_config_class

    config_cls = get_config_class(args.algorithm)  # for most algorithms, no torch
    bounds = bounds_of(config_cls)
    for f in dataclasses.fields(config_cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        bound = f"  ({bounds[f.name]})" if f.name in bounds else ""
        print(f"{f.name} = {default!r}{bound}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line, for ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = build_parser().parse_args(argv)  # help and usage errors end here, quickly
    from hrl_tasks.scheduler import EngineError

    try:
        if args.command == "keys":
            return run_keys(args)
        if args.command == "tune":
            return run_tune(args)
        return run_train(args)
    except KeyboardInterrupt:
        print("hrl-tasks: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, EngineError) as exc:  # bad input: one line, no traceback
        print(f"hrl-tasks: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run() -> None:
    """The ``hrl-tasks`` console script: `main`, then the process ends at once.

    Everything of the run is closed and flushed by then; tearing down an
    interpreter that has imported torch would take about 0.4 s more here. Usage
    errors and tracebacks end as usual.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    run()
