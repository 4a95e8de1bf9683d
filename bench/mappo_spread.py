"""Cooperative multi-agent PPO on MPE's simple_spread (mpe2): independent PPO against a
centralized critic (MAPPO), each against the random policy measured in the same run.

Three agents must cover three landmarks without colliding; an episode is 25
steps and its return here is the sum over the agents (mpe2's default
``local_ratio=0.5`` mixes the shared and each agent's local reward). Both runs
share one policy among the agents (parameter sharing, as Yu et al. 2022) and
the same budget of env steps; MAPPO's critic also sees the env's global state.
The target: a trained mean return at least the random policy's plus a quarter
of its magnitude.

    python bench/mappo_spread.py --steps 1000000

Prints one JSON line per run (progress) and a last one with the result.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hrl_tasks.algorithms import PPO
from hrl_tasks.envs.multi_agent import make_multi_agent_env

ENV, ENV_CONFIG = "mpe2.simple_spread_v3", {"max_cycles": 25}


def random_return(episodes: int, seed: int) -> float:
    """The mean episode return (sum over agents) of uniformly random actions."""
    env, rng, totals = make_multi_agent_env(ENV, ENV_CONFIG), np.random.default_rng(seed), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, over = 0.0, False
        while not over:
            actions = {agent: int(rng.integers(env.action_space(agent).n)) for agent in obs}
            obs, rewards, terminateds, truncateds, _ = env.step(actions)
            total += sum(rewards.values())
            over = terminateds["__all__"] or truncateds["__all__"]
        totals.append(total)
    return float(np.mean(totals))


def train(central_critic: bool, steps: int, seed: int, out: Path, extra: dict) -> dict:
    config = {
        "env": ENV,
        "env_config": ENV_CONFIG,
        "central_critic": central_critic,
        "seed": seed,
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 25,
        "train_batch_size": 3200,
        "minibatch_size": 800,
        "num_sgd_iter": 10,
        "lr": 7e-4,
        "ent_coef": 0.01,
        "gamma": 0.99,
        "lam": 0.95,
        "metrics_smoothing_episodes": 200,
        **extra,
    }
    label = "mappo" if central_critic else "ippo"
    algo, rows, start = PPO(config), [], time.perf_counter()
    try:
        while not rows or rows[-1]["env_steps_sampled"] < steps:
            result = algo.train()
            rows.append({k: result[k] for k in ("iteration", "env_steps_sampled",
                                                "episode_return_mean", "time_total_s")})  # fmt: skip
            if result["iteration"] % 20 == 0:
                print(json.dumps({"run": label, **rows[-1]}), flush=True)
    finally:
        algo.stop()
    with open(out / f"{label}.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    last = rows[-10:]  # the mean of the last ten iterations' returns
    return {
        "return": float(np.mean([r["episode_return_mean"] for r in last])),
        "env_steps": rows[-1]["env_steps_sampled"],
        "time_s": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-episodes", type=int, default=500)
    parser.add_argument("--out", default="runs/bench-mappo-spread")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a PPO config key for both runs, e.g. --set grad_clip=10 (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    extra = {key: json.loads(value) for key, _, value in (item.partition("=") for item in args.set)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    baseline = random_return(args.random_episodes, args.seed)
    target = baseline + 0.25 * abs(baseline)
    runs = {
        "ippo": train(False, args.steps, args.seed, out, extra),
        "mappo": train(True, args.steps, args.seed, out, extra),
    }
    print(json.dumps({
        "bench": "mappo_spread",
        "random_return": round(baseline, 2),
        "target_return": round(target, 2),
        **{f"{name}_return": round(run["return"], 2) for name, run in runs.items()},
        **{f"{name}_met": run["return"] >= target for name, run in runs.items()},
        **{f"{name}_time_s": run["time_s"] for name, run in runs.items()},
        "env_steps": args.steps,
        "settings": extra,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
