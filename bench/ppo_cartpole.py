"""Time to solve CartPole-v1 with PPO: hrl_tasks on the embedded cluster against Stable-Baselines3.

Wall-clock seconds and env steps until the mean return of the last 20 episodes
reaches 450, counting hrl_tasks' cluster start-up. When stable-baselines3 is
installed (``pip install -e ".[bench]"``), the same measurement for its PPO with
the rl-zoo CartPole settings, in the same run, and the ratio. Prints one JSON line.

    python bench/ppo_cartpole.py [--seeds 0 1 2] [--budget 300000]
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

TARGET = 450.0
WINDOW = 20

# rl-zoo's CartPole-v1 hyperparameters, mapped onto hrl_tasks' PPO:
# n_envs=8 (2 workers x 4 envs), n_steps=32 (fragment), batch 256, n_epochs 20.
HRL_CONFIG = {
    "num_workers": 2,
    "num_envs_per_worker": 4,
    "rollout_fragment_length": 32,
    "train_batch_size": 256,
    "minibatch_size": 256,
    "num_sgd_iter": 20,
    "lr": 1e-3,
    "gamma": 0.98,
    "lam": 0.8,
    "ent_coef": 0.0,
    "clip": 0.2,
}


def hrl_time_to_solve(seed: int, budget: int) -> dict:
    import hrl_tasks

    start = time.perf_counter()
    algo, result = hrl_tasks.train(
        "ppo",
        env="CartPole-v1",
        stop={"episode_return_mean": TARGET, "env_steps_sampled": budget},
        seed=seed,
        **HRL_CONFIG,
    )
    algo.stop()
    return {
        "solved": result["episode_return_mean"] >= TARGET,
        "seconds": time.perf_counter() - start,
        "env_steps": result["env_steps_sampled"],
    }


def sb3_time_to_solve(seed: int, budget: int) -> dict | None:
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError:
        return None

    class StopAtTarget(BaseCallback):
        def _on_step(self) -> bool:
            episodes = list(self.model.ep_info_buffer)[-WINDOW:]
            return not (len(episodes) >= WINDOW and np.mean([e["r"] for e in episodes]) >= TARGET)

    start = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    model.learn(total_timesteps=budget, callback=StopAtTarget())
    episodes = list(model.ep_info_buffer)[-WINDOW:]
    return {
        "solved": bool(episodes) and float(np.mean([e["r"] for e in episodes])) >= TARGET,
        "seconds": time.perf_counter() - start,
        "env_steps": int(model.num_timesteps),
    }


def summarize(runs: list[dict]) -> dict:
    solved = [r for r in runs if r["solved"]]
    return {
        "solved": f"{len(solved)}/{len(runs)}",
        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 2),
        "median_env_steps": int(statistics.median(r["env_steps"] for r in runs)),
        "runs": [
            {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in runs
        ],
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=300_000, help="env steps before giving up")
    args = parser.parse_args()

    hrl = summarize([hrl_time_to_solve(s, args.budget) for s in args.seeds])
    sb3_runs = [sb3_time_to_solve(s, args.budget) for s in args.seeds]
    figures = {
        "bench": "ppo_cartpole",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "target": f"mean return of the last {WINDOW} episodes >= {TARGET:g}",
        "hrl_tasks": hrl,
    }
    if all(r is not None for r in sb3_runs):
        sb3 = summarize(sb3_runs)
        figures["stable_baselines3"] = sb3
        figures["seconds_ratio_hrl_over_sb3"] = round(
            hrl["median_seconds"] / sb3["median_seconds"], 3
        )
    else:
        figures["stable_baselines3"] = "not installed (pip install -e '.[bench]')"
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
