"""Learner updates per second: SAC's networks on HalfCheetah-v5's shapes, against
Stable-Baselines3's SAC doing the same update; and a data-parallel learner group
(``num_learners``) of 1 and 2 processes against the driver alone, for SAC's update
and IMPALA's on the Atari Nature CNN.

One update is what SAC does per env step at rl-zoo's settings: a batch of 256
replayed rows, the twin critics', the actor's and the temperature's losses, one
Adam step, a Polyak step of the target critics. hrl_tasks' `SACPolicy` and
Stable-Baselines3's ``SAC.train(gradient_steps=...)`` run interleaved, round by
round, with 1 and 2 torch threads; the figure per side is the median over
rounds. Where the time goes in hrl_tasks' update is profiled once (``profile``:
seconds per update by torch kernel family). Prints one JSON line.

The learner group's rows (``--group``, on by default) time ``LearnerGroup.learn_on_batch``
on an embedded cluster of two single-threaded worker processes, interleaved round by
round with the same update in this process on 1 and 2 torch threads (the fastest
simple way on one machine). Where a group's time goes, per update: the learners'
``learn_on_batch`` (of which all-reduce, waiting for the slower peer included), the
copy of the state to roll back to, and the rest (sending the batch, the call).

    python bench/learners.py [--updates 300] [--rounds 3] [--no-group]
"""

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.sac import SACPolicy, SACPolicyConfig

OBS, ACTIONS, BATCH = 17, 6, 256  # HalfCheetah-v5


def batch(rng) -> SampleBatch:
    return SampleBatch({
        "obs": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "next_obs": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (BATCH, ACTIONS)).astype(np.float32),
        "rewards": rng.normal(size=BATCH).astype(np.float32),
        "terminateds": np.zeros(BATCH, bool), "truncateds": np.zeros(BATCH, bool),
    })  # fmt: skip


def ours(updates: int) -> tuple[float, SACPolicy]:
    space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    policy = SACPolicy(
        space, gym.spaces.Box(-1, 1, (ACTIONS,), np.float32), SACPolicyConfig(seed=0)
    )
    rows = batch(np.random.default_rng(0))
    for _ in range(10):
        policy.learn_on_batch(rows)
    start = time.perf_counter()
    for _ in range(updates):
        policy.learn_on_batch(rows)
        policy.update_target()
    return (time.perf_counter() - start) / updates, policy


def sb3(updates: int) -> float:
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", "HalfCheetah-v5", learning_starts=0, device="cpu", seed=0, verbose=0)
    model.learn(BATCH)  # a replay to sample from
    model.train(gradient_steps=10, batch_size=BATCH)
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH)
    return (time.perf_counter() - start) / updates


def profile(policy: SACPolicy, updates: int) -> dict:
    rows = batch(np.random.default_rng(1))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(updates):
        policy.learn_on_batch(rows)
        policy.update_target()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    families = {"backward": "run_backward", "linear (forward)": "linear",
                "adam": "_fused_adam_", "relu/tanh": ("relu", "tanh")}  # fmt: skip
    total = sum(entry[2] for entry in stats.values())
    out = {}
    for label, names in families.items():
        names = (names,) if isinstance(names, str) else names
        seconds = sum(
            entry[2] for (_, _, fn), entry in stats.items() if any(n in fn for n in names)
        )
        out[label] = round(1e3 * seconds / updates, 2)
    out["everything else"] = round(1e3 * total / updates - sum(out.values()), 2)
    return out  # ms per update


def nature_cnn_case(rng):
    """IMPALA on Atari frames: (4, 84, 84) uint8, 6 actions, 16 fragments of 32 steps."""
    from hrl_tasks.policies import IMPALAPolicy, IMPALAPolicyConfig

    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = IMPALAPolicy(space, gym.spaces.Discrete(6),
                          IMPALAPolicyConfig(seed=0, hidden=(), rollout_fragment_length=32))  # fmt: skip
    n = 16 * 32
    rows = SampleBatch({
        "obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8),
        "actions": rng.integers(0, 6, n), "logp": np.full(n, -np.log(6), np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "terminateds": np.zeros(n, bool), "truncateds": np.zeros(n, bool),
        "next_values": np.zeros(n, np.float32), "values": np.zeros(n, np.float32),
    })  # fmt: skip
    return policy, rows


def sac_case(rng):
    space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    policy = SACPolicy(
        space, gym.spaces.Box(-1, 1, (ACTIONS,), np.float32), SACPolicyConfig(seed=0)
    )
    return policy, batch(rng)


def group_figures(updates: int, rounds: int) -> dict:
    """Updates per second of each case: in this process (1, 2 threads), and in learner
    groups of 1 and 2 processes; with where a group's time goes."""
    import hrl_tasks
    from hrl_tasks.rollout.learner_group import LearnerGroup

    out = {}
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        for name, make, n_updates in (("sac", sac_case, updates),
                                      ("impala_nature_cnn", nature_cnn_case, max(5, updates // 20))):  # fmt: skip
            timed: dict[str, list[float]] = {}
            parts: dict[str, dict[str, list[float]]] = {}
            for _ in range(rounds):
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    policy, rows = make(np.random.default_rng(0))
                    policy.learn_on_batch(rows)
                    start = time.perf_counter()
                    for _ in range(n_updates):
                        policy.learn_on_batch(rows)
                    timed.setdefault(f"driver_{threads}_threads", []).append(
                        (time.perf_counter() - start) / n_updates
                    )
                torch.set_num_threads(1)
                for size in (1, 2):
                    policy, rows = make(np.random.default_rng(0))
                    group = LearnerGroup(engine, policy, size, resources={"CPU": 1})
                    try:
                        group.learn_on_batch(rows)
                        engine.gather([h.call("timings", direct=True) for h in group.handles])
                        start = time.perf_counter()
                        for _ in range(n_updates):
                            group.learn_on_batch(rows)
                        seconds = (time.perf_counter() - start) / n_updates
                        spent = engine.gather([h.call("timings", direct=True)
                                               for h in group.handles])  # fmt: skip
                    finally:
                        group.stop()
                    key = f"group_of_{size}"
                    timed.setdefault(key, []).append(seconds)
                    slowest = max(spent, key=lambda t: t["learn_s"])
                    share = parts.setdefault(key, {})
                    for part in ("learn_s", "reduce_s", "snapshot_s"):
                        share.setdefault(part, []).append(slowest[part] / n_updates)
            case = {k: {"ms_per_update": round(1e3 * statistics.median(v), 2),
                        "updates_per_s": round(1 / statistics.median(v), 2)}
                    for k, v in timed.items()}  # fmt: skip
            for key, share in parts.items():
                ms = {k: 1e3 * statistics.median(v) for k, v in share.items()}
                case[key]["where_ms"] = {
                    "learn_on_batch": round(ms["learn_s"] - ms["reduce_s"], 2),
                    "all_reduce_and_waiting": round(ms["reduce_s"], 2),
                    "state_snapshot": round(ms["snapshot_s"], 2),
                    "call_and_transfer": round(case[key]["ms_per_update"] - ms["learn_s"]
                                               - ms["snapshot_s"], 2),
                }  # fmt: skip
            best = min(case["driver_1_threads"]["ms_per_update"],
                       case["driver_2_threads"]["ms_per_update"])  # fmt: skip
            case["ratio_group_of_2_over_best_driver"] = round(
                case["group_of_2"]["ms_per_update"] / best, 3
            )
            out[name] = case
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-group", dest="group", action="store_false",
                        help="leave out the learner group's figures")  # fmt: skip
    args = parser.parse_args()
    figures = {"bench": "learners", "date": time.strftime("%Y-%m-%d"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                          f"Python {platform.python_version()}, torch {torch.__version__}",
               "update": f"SAC, batch {BATCH}, HalfCheetah-v5 shapes, (256, 256) networks"}  # fmt: skip
    for threads in (1, 2):
        torch.set_num_threads(threads)
        mine, theirs = [], []
        for _ in range(args.rounds):
            seconds, policy = ours(args.updates)
            mine.append(seconds)
            theirs.append(sb3(args.updates))
        figures[f"{threads}_threads"] = {
            "hrl_tasks_ms_per_update": round(1e3 * statistics.median(mine), 2),
            "sb3_ms_per_update": round(1e3 * statistics.median(theirs), 2),
            "ratio_hrl_over_sb3": round(statistics.median(mine) / statistics.median(theirs), 3),
            "hrl_tasks_updates_per_s": round(1 / statistics.median(mine), 1),
        }
        if threads == 1:
            figures["profile_ms_per_update_1_thread"] = profile(policy, args.updates)
    if args.group:
        figures["learner_group"] = group_figures(args.updates, args.rounds)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
