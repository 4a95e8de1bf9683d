"""A long-horizon task, flat PPO against a two-level hierarchy of PPO policies.

The task (`hrl_tasks.envs.rooms`): 4 x 4 rooms of 5 x 5 cells joined by doors,
from the centre of the first room to the centre of the last (36 steps at best),
within 500 steps, reward 1 there and nothing else. The flat agent is PPO on
`Rooms-v0`; the hierarchical one is one multi-agent PPO flow with two policies:
``high`` picks a door of the current room or its centre (an option), ``low`` walks there,
paid for arriving. Both get the same budget of env steps (the hierarchy's
count includes its high-level decisions, about one in ten). Every
``--eval-every`` iterations each plays ``--episodes`` evaluation episodes with
its sampling policy; the target: flat below 20% reaching the goal, the
hierarchy above 80%.

    python bench/hierarchical_rooms.py --steps 1000000

Writes ``flat.jsonl`` and ``hierarchical.jsonl`` (success rate against env
steps) into ``--out`` and prints one JSON line with the result.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hrl_tasks.algorithms import PPO
from hrl_tasks.envs.rooms import HierarchicalRooms, Rooms, hierarchical_rooms, high_or_low
from hrl_tasks.policies.policy_map import PolicySpec

FLAT_ENV = "hrl_tasks.envs.rooms:Rooms-v0"
COMMON = {"num_workers": 2, "num_envs_per_worker": 8, "rollout_fragment_length": 64,
          "train_batch_size": 4096, "minibatch_size": 512, "num_sgd_iter": 4, "lr": 3e-4,
          "ent_coef": 0.01, "gamma": 0.99, "metrics_smoothing_episodes": 50}  # fmt: skip


def flat_success(algo, episodes: int) -> float:
    env, reached = Rooms(), 0
    for _ in range(episodes):
        obs, _ = env.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(
                algo.compute_single_action(obs, explore=True)
            )
            if terminated or truncated:
                reached += int(terminated)
                break
    return reached / episodes


def hierarchical_success(algo, episodes: int) -> float:
    env, reached = HierarchicalRooms(), 0
    for _ in range(episodes):
        obs, _ = env.reset()
        while True:
            actions = {
                agent: algo.compute_single_action(
                    o, explore=True, policy_id=high_or_low(agent, None)
                )
                for agent, o in obs.items()
            }
            obs, rewards, terminateds, truncateds, _ = env.step(actions)
            if terminateds["__all__"] or truncateds["__all__"]:
                reached += int(terminateds["__all__"])
                break
            obs = {a: o for a, o in obs.items() if not (terminateds.get(a) or truncateds.get(a))}
    return reached / episodes


def run(label: str, config: dict, success, steps: int, eval_every: int, episodes: int,
        out: Path) -> dict:  # fmt: skip
    algo, rows, start = PPO(config), [], time.perf_counter()
    try:
        while not rows or rows[-1]["env_steps"] < steps:
            result = algo.train()
            row = {"iteration": result["iteration"], "env_steps": result["env_steps_sampled"],
                   "time_s": round(time.perf_counter() - start, 1)}  # fmt: skip
            if result["iteration"] % eval_every == 0:
                row["success"] = success(algo, episodes)
                print(json.dumps({"run": label, **row}), flush=True)
            rows.append(row)
        final = success(algo, 4 * episodes)
    finally:
        algo.stop()
    with open(out / f"{label}.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return {"success": final, "env_steps": rows[-1]["env_steps"], "time_s": rows[-1]["time_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench-hierarchical-rooms")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flat = {**COMMON, "env": FLAT_ENV, "seed": args.seed}
    hierarchy = {
        **COMMON,
        "env": hierarchical_rooms,
        "seed": args.seed,
        "policies": {"high": PolicySpec(), "low": PolicySpec()},
        "policy_mapping_fn": high_or_low,
    }
    results = {
        "flat": run("flat", flat, flat_success, args.steps, args.eval_every, args.episodes, out),
        "hierarchical": run("hierarchical", hierarchy, hierarchical_success, args.steps,
                            args.eval_every, args.episodes, out),
    }  # fmt: skip
    print(json.dumps({
        "bench": "hierarchical_rooms",
        "target": "flat < 0.2, hierarchical > 0.8",
        "flat_success": results["flat"]["success"],
        "hierarchical_success": results["hierarchical"]["success"],
        "met": results["flat"]["success"] < 0.2 and results["hierarchical"]["success"] > 0.8,
        "episodes": 4 * args.episodes,
        **{f"{k}_time_s": v["time_s"] for k, v in results.items()},
        **{f"{k}_env_steps": v["env_steps"] for k, v in results.items()},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
