"""PPO learns Connect Four by self-play against a small league of its own snapshots.

Every ``--eval-every`` iterations the learning policy plays ``--games`` greedy
games against a uniformly random player, half of them moving first. The
target: at least 90% wins within 30 minutes; training stops at the first
evaluation that meets it (``--train-on``: after ``--minutes``). At the end it
plays fresh games against random and the planning opponents (alpha-beta at
depths 1 and 2, UCT with 100 simulations).

    python bench/selfplay_connect_four.py --minutes 30

Prints one JSON line per evaluation and a last one with the result.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hrl_tasks.algorithms import PPO
from hrl_tasks.algorithms.self_play import MAIN, SelfPlay
from hrl_tasks.planning.games import make_game
from hrl_tasks.planning.opponents import PolicyPlayer, RandomPlayer, parse_opponent, play_match
from hrl_tasks.policies.policy_map import PolicySpec

TARGET = 0.9
OPPONENTS = ("alphabeta-1", "alphabeta-2", "uct-100")


def experiment(seed: int) -> tuple[dict, SelfPlay]:
    league = SelfPlay(("player_0", "player_1"), snapshots=4, snapshot_every=5, seed=seed,
                      spec=PolicySpec(config={"hidden": (128, 128)}))  # fmt: skip
    config = {
        "env": "connect_four_v3",
        "seed": seed,
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 32,
        "train_batch_size": 4096,
        "minibatch_size": 512,
        "num_sgd_iter": 4,
        "lr": 3e-4,
        "ent_coef": 0.01,
        "gamma": 0.99,
        **league.config(),
    }
    return config, league


def win_rate(algo, opponent, games: int, seed: int) -> dict:
    game, rng = make_game("connect_four_v3"), np.random.default_rng(seed)
    return play_match(game, PolicyPlayer(algo, MAIN), opponent, games, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-on", action="store_true",
        help="go on training for all --minutes after the target is met (default: stop there)",
    )  # fmt: skip
    parser.add_argument("--out", default="runs/bench-selfplay-connect-four")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config, _ = experiment(args.seed)
    algo = PPO(config)
    start, rows, reached = time.perf_counter(), [], None
    try:
        while time.perf_counter() - start < args.minutes * 60:
            result = algo.train()
            row = {
                "iteration": result["iteration"],
                "time_s": round(time.perf_counter() - start, 1),
                "env_steps": result["env_steps_sampled"],
                "policy_return_mean/main": result.get("policy_return_mean/main"),
            }
            if result["iteration"] % args.eval_every == 0:
                score = win_rate(algo, RandomPlayer(), args.games, result["iteration"])
                row["win_rate/random"] = score["win_rate"]
                print(json.dumps(row), flush=True)
                if reached is None and score["win_rate"] >= TARGET:
                    reached = row
                    if not args.train_on:
                        rows.append(row)
                        break
            rows.append(row)
        algo.save(out / "checkpoint.hrl")
        final = {"random": win_rate(algo, RandomPlayer(), 2 * args.games, 1)["win_rate"]}
        for name in OPPONENTS:
            final[name] = win_rate(algo, parse_opponent(name), 20, 2)["score"]
    finally:
        algo.stop()
    with open(out / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    print(json.dumps({
        "bench": "selfplay_connect_four",
        "target_win_rate_vs_random": TARGET,
        "reached": reached is not None,
        "reached_time_s": reached and reached["time_s"],
        "reached_env_steps": reached and reached["env_steps"],
        "time_s": rows[-1]["time_s"],
        "env_steps": rows[-1]["env_steps"],
        "final_win_rate_vs_random": final["random"],
        "final_games_vs_random": 2 * args.games,
        **{f"score_vs_{name}": final[name] for name in OPPONENTS},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
