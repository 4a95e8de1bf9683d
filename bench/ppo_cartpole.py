"""Time to solve CartPole-v1 with PPO: hrl_tasks on the embedded cluster against Stable-Baselines3.

Wall-clock seconds and env steps until the mean return of the last 20 episodes
reaches 450, counting hrl_tasks' cluster start-up. When stable-baselines3 is
installed (``pip install -e ".[bench]"``), the same measurement for its PPO with
the rl-zoo CartPole settings, in the same run, and the ratio. Prints one JSON line.

The two alternate seed by seed (hrl_tasks, then Stable-Baselines3, on the same
seed), so that a machine whose speed drifts during the run (a shared VM) slows
both alike; ``seconds_ratio_per_seed`` is the median of the per-seed ratios.
``ms_per_env_step`` (all seconds over all steps, start-up included) compares
speed apart from how many steps a seed happens to need. Both libraries are
imported before any timing starts.

    python bench/ppo_cartpole.py [--seeds 0 1 2] [--budget 300000] [--set overlap_sampling=false]
"""

import argparse
import contextlib
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
# Stable-Baselines3's value loss is vf_coef * MSE with vf_coef 0.5; hrl_tasks'
# (CleanRL's) is vf_coef * 0.5 * MSE, so the same loss takes vf_coef 1.0 here.
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
    "vf_coef": 1.0,
}


def hrl_time_to_solve(seed: int, budget: int, config: dict) -> dict:
    import hrl_tasks

    start = time.perf_counter()
    algo, result = hrl_tasks.train(
        "ppo",
        env="CartPole-v1",
        stop={"episode_return_mean": TARGET, "env_steps_sampled": budget},
        seed=seed,
        **config,
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
    seconds, steps = sum(r["seconds"] for r in runs), sum(r["env_steps"] for r in runs)
    return {
        "solved": f"{len(solved)}/{len(runs)}",
        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 2),
        "median_env_steps": int(statistics.median(r["env_steps"] for r in runs)),
        "ms_per_env_step": round(1e3 * seconds / steps, 4),
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
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=JSON", help="override a key of HRL_CONFIG"
    )
    args = parser.parse_args()
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    config = {**HRL_CONFIG, **overrides}

    import hrl_tasks.algorithms  # noqa: F401  (import time is not timed, as for SB3)

    with contextlib.suppress(ImportError):
        import stable_baselines3  # noqa: F401
    hrl_runs, sb3_runs = [], []
    for seed in args.seeds:
        hrl_runs.append(hrl_time_to_solve(seed, args.budget, config))
        sb3_runs.append(sb3_time_to_solve(seed, args.budget))
    hrl = summarize(hrl_runs)
    figures = {
        "bench": "ppo_cartpole",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "target": f"mean return of the last {WINDOW} episodes >= {TARGET:g}",
        "hrl_config_overrides": overrides,
        "hrl_tasks": hrl,
    }
    if all(r is not None for r in sb3_runs):
        sb3 = summarize(sb3_runs)
        figures["stable_baselines3"] = sb3
        figures["seconds_ratio_hrl_over_sb3"] = round(
            hrl["median_seconds"] / sb3["median_seconds"], 3
        )
        figures["seconds_ratio_per_seed"] = round(
            statistics.median(
                h["seconds"] / b["seconds"] for h, b in zip(hrl_runs, sb3_runs, strict=True)
            ),
            3,
        )
    else:
        figures["stable_baselines3"] = "not installed (pip install -e '.[bench]')"
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
