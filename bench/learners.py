"""Learner updates per second: SAC's networks on HalfCheetah-v5's shapes, against
Stable-Baselines3's SAC doing the same update.

One update is what SAC does per env step at rl-zoo's settings: a batch of 256
replayed rows, the twin critics', the actor's and the temperature's losses, one
Adam step, a Polyak step of the target critics. hrl_tasks' `SACPolicy` and
Stable-Baselines3's ``SAC.train(gradient_steps=...)`` run interleaved, round by
round, with 1 and 2 torch threads; the figure per side is the median over
rounds. Where the time goes in hrl_tasks' update is profiled once (``profile``:
seconds per update by torch kernel family). Prints one JSON line.

    python bench/learners.py [--updates 300] [--rounds 3]
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
from hrl_tasks.policies.sac import SACConfig, SACPolicy

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
    policy = SACPolicy(space, gym.spaces.Box(-1, 1, (ACTIONS,), np.float32), SACConfig(seed=0))
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


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
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
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
