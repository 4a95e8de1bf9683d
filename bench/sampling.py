"""Sampling throughput: CartPole-v1 env steps per second with a 64x64 MLP policy.

In one run: a plain single-process gymnasium vector-env loop (the baseline),
the same RolloutWorker in the driver, and a WorkerSet with 1, 2 and 4 remote
rollout workers sampling asynchronously (2 requests in flight per worker).
Target on 2 cores: 2 workers >= 1.6x the plain loop (the limit is 2x).

Each remote ``sample`` call is one Dask task, and a Dask worker spends a few
milliseconds of CPU on every task (messages, result transfer): on this 2-core
machine a worker process loses about 15% of a 2048-step call to it, with
``client.submit`` as with the engine. So workers take ``--fragment`` 1024 steps
per sub-env (8192 env steps, about 0.3 s, per call), and 2 workers are measured
again with ``--small-fragment`` 256 (2048 steps per call, RLlib's usual size).
Prints one JSON line, including ``ratio_2_workers``,
``ratio_2_workers_small_calls`` and the bytes on the wire per env step (the
encoded SampleBatch).

With ``--numpy``, everything acts with the policy's numpy inference copy (the
plain loop too, so the ratios compare like with like) and the workers are
called directly, as the algorithms do.

With ``--recording``, only 2 workers are measured, with and without recording what
they sample to Parquet (``record_experience``, in a temporary directory), alternating
over 3 rounds; ``recording_ratio`` is the median with over the median without.
CartPole is the hardest case for it: its steps cost the least to sample.

With ``--envpool``, the two backends of the rollout workers side by side, alternating
over 2 rounds: a single-process loop on gymnasium's vector env and on EnvPool's
(``num_threads=1``), and 2 remote rollout workers on each (``env_backend``);
``envpool_loop_ratio`` and ``envpool_workers_ratio`` are EnvPool's medians over
gymnasium's.

    python bench/sampling.py [--seconds 8] [--fragment 1024] [--small-fragment 256] [--numpy]
    python bench/sampling.py --numpy --small-fragment 256 --recording
    python bench/sampling.py --numpy --small-fragment 256 --envpool
"""

import argparse
import json
import os
import platform
import time

import gymnasium as gym
import torch

import hrl_tasks as hrl
from hrl_tasks.data import encode
from hrl_tasks.flow import FlowContext, ParallelRollouts
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import RolloutWorker, WorkerSet

ENVS = 8
FRAGMENT = 1024  # 8192 env steps per sample call (--fragment)
SMALL_FRAGMENT = 256  # 2048 env steps per call (--small-fragment)


def make_policy(numpy: bool = False):
    """The 64x64 PPO policy, or its numpy inference copy (what the algorithms' workers use)."""
    env = gym.make("CartPole-v1")
    policy = PPOPolicy(
        env.observation_space, env.action_space, PPOPolicyConfig(hidden=(64, 64), seed=0)
    )
    return policy.inference_copy() if numpy else policy


def plain_loop(seconds: float, numpy: bool = False, policy=None, backend="gymnasium") -> float:
    """env.step with the policy's actions, nothing else: the baseline (``policy``
    default: `make_policy`); with ``backend="envpool"`` EnvPool's vector env at one thread."""
    policy = make_policy(numpy) if policy is None else policy
    if backend == "envpool":
        import envpool

        envs = envpool.make_gymnasium("CartPole-v1", num_envs=ENVS, num_threads=1, seed=0)
    else:
        envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(ENVS)])
    obs, _ = envs.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions, _ = policy.compute_actions(obs)
        obs, *_ = envs.step(actions)
        steps += ENVS
    return steps / (time.perf_counter() - start)


def local_worker(seconds: float, fragment: int, numpy: bool = False) -> tuple[float, float]:
    """The RolloutWorker in this process (batches, GAE); also bytes per step."""
    worker = RolloutWorker("CartPole-v1", make_policy(numpy), ENVS, fragment, seed=0)
    batch, _ = worker.sample()
    bytes_per_step = len(encode(batch)) / len(batch)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch, _ = worker.sample()
        steps += len(batch)
    worker.close()
    return steps / (time.perf_counter() - start), bytes_per_step


def worker_set(
    n: int,
    seconds: float,
    fragment: int,
    numpy: bool = False,
    record: str | None = None,
    backend: str = "gymnasium",
) -> float:
    with hrl.Engine.local(n_workers=n, threads_per_worker=1) as engine:
        workers = WorkerSet(
            engine, "CartPole-v1", make_policy(numpy), n, ENVS, fragment, seed=0,
            direct_calls=numpy, record_experience=record, env_backend=backend,
        )  # fmt: skip
        ctx = FlowContext()
        batches = ParallelRollouts(workers, ctx, mode="async", num_async=2)
        next(batches)  # warm up every worker's first call
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += len(next(batches))
        rate = steps / (time.perf_counter() - start)
        workers.stop()
    time.sleep(2.0)  # let the worker processes exit before the next measurement
    return rate


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring time per setting")
    parser.add_argument(
        "--fragment", type=int, default=FRAGMENT, help="steps per sub-env in one sample call"
    )
    parser.add_argument(
        "--small-fragment",
        type=int,
        default=SMALL_FRAGMENT,
        help="the same for the second 2-worker measurement",
    )
    parser.add_argument(
        "--numpy",
        action="store_true",
        help="act with the policy's numpy inference copy, everywhere (the plain loop too), "
        "and call the workers directly: the algorithms' way",
    )
    parser.add_argument(
        "--recording", action="store_true",
        help="measure 2 workers with and without recording to Parquet, and only that",
    )  # fmt: skip
    parser.add_argument(
        "--envpool", action="store_true",
        help="measure the loop and 2 workers on gymnasium's and EnvPool's envs, and only that",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)  # as rollout processes do (DESIGN.md): the faster baseline
    if args.recording:
        print(json.dumps(recording_overhead(args)))
        return
    if args.envpool:
        print(json.dumps(backends(args)))
        return
    plain_before = plain_loop(args.seconds, args.numpy)
    local, bytes_per_step = local_worker(args.seconds, args.fragment, args.numpy)
    remote = {n: worker_set(n, args.seconds, args.fragment, args.numpy) for n in (1, 2, 4)}
    small_calls = worker_set(2, args.seconds, args.small_fragment, args.numpy)
    # The baseline again at the end, so that a slow spell of the machine at either
    # end does not decide the ratios; they use the mean of the two.
    plain_after = plain_loop(args.seconds, args.numpy)
    plain = (plain_before + plain_after) / 2
    print(
        json.dumps(
            {
                "bench": "sampling",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                "policy": "numpy copy, direct calls" if args.numpy else "torch",
                "envs_per_worker": ENVS,
                "steps_per_call": ENVS * args.fragment,
                "plain_loop_steps_per_s": round(plain),
                "plain_loop_first_last": [round(plain_before), round(plain_after)],
                "local_rollout_worker_steps_per_s": round(local),
                "workers_1_steps_per_s": round(remote[1]),
                "workers_2_steps_per_s": round(remote[2]),
                "workers_4_steps_per_s": round(remote[4]),
                "ratio_2_workers": round(remote[2] / plain, 3),
                "ratio_2_workers_vs_local_worker": round(remote[2] / local, 3),
                "steps_per_small_call": ENVS * args.small_fragment,
                "workers_2_small_calls_steps_per_s": round(small_calls),
                "ratio_2_workers_small_calls": round(small_calls / plain, 3),
                "bytes_per_env_step": round(bytes_per_step, 1),
            }
        )
    )


def backends(args) -> dict:
    """The plain loop and 2 workers on each backend, alternating over 2 rounds."""
    import statistics

    loop: dict[str, list[float]] = {"gymnasium": [], "envpool": []}
    workers: dict[str, list[float]] = {"gymnasium": [], "envpool": []}
    for k in range(2):
        for backend in ("gymnasium", "envpool") if k == 0 else ("envpool", "gymnasium"):
            loop[backend].append(plain_loop(args.seconds, args.numpy, backend=backend))
            workers[backend].append(
                worker_set(2, args.seconds, args.small_fragment, args.numpy, backend=backend)
            )

    def ratio(rates: dict) -> float:
        return round(statistics.median(rates["envpool"]) / statistics.median(rates["gymnasium"]), 3)

    return {
        "bench": "sampling_backends", "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "policy": "numpy copy, direct calls" if args.numpy else "torch",
        "envs": ENVS, "steps_per_call": ENVS * args.small_fragment,
        "loop_steps_per_s": {b: [round(r) for r in v] for b, v in loop.items()},
        "workers_2_steps_per_s": {b: [round(r) for r in v] for b, v in workers.items()},
        "envpool_loop_ratio": ratio(loop), "envpool_workers_ratio": ratio(workers),
    }  # fmt: skip


def recording_overhead(args) -> dict:
    """2 workers with and without ``record_experience``, alternating over 3 rounds."""
    import statistics
    import tempfile

    rates: dict[str, list[float]] = {"without": [], "with": []}
    rows = 0
    with tempfile.TemporaryDirectory() as directory:
        for k in range(3):
            for side in ("without", "with") if k % 2 == 0 else ("with", "without"):
                record = f"{directory}/round-{k}" if side == "with" else None
                rates[side].append(worker_set(2, args.seconds, args.small_fragment, args.numpy,
                                              record))  # fmt: skip
        from hrl_tasks.data.experience import experience_files, read_file

        rows = sum(
            len(read_file(p)["rewards"]) for p in experience_files(f"{directory}/*/*.parquet")
        )
    ratio = statistics.median(rates["with"]) / statistics.median(rates["without"])
    return {
        "bench": "sampling_recording", "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "policy": "numpy copy, direct calls" if args.numpy else "torch",
        "workers": 2, "steps_per_call": ENVS * args.small_fragment,
        "steps_per_s_without": [round(r) for r in rates["without"]],
        "steps_per_s_with": [round(r) for r in rates["with"]],
        "rows_recorded": rows, "recording_ratio": round(ratio, 3),
    }  # fmt: skip


if __name__ == "__main__":
    main()
