"""PPO and DQN trained together on tic-tac-toe, each as one player, in one flow.

A `composition`: PPO plays first (``player_1``), DQN second (``player_2``); one
rollout flow feeds PPO's on-policy sub-flow and DQN's replay sub-flow, which
run at the same time. Every ``--eval-every`` iterations each policy plays
``--games`` greedy games against a uniformly random player, from its own
seat. The target: each wins or draws at least 85% of them. Training stops at
the first evaluation that meets it with ``--margin`` to spare (``--train-on``:
after ``--minutes``); then
each plays ``2 * --games`` fresh games against random, and ``--games`` against
perfect play (minimax; a draw is the best possible score there, 0.5).

    python bench/multiagent_tictactoe.py --minutes 20

Prints one JSON line per evaluation and a last one with the result; writes
the curve to ``--out`` (metrics.jsonl and curve.png).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hrl_tasks.algorithms import get_algorithm
from hrl_tasks.planning.games import make_game
from hrl_tasks.planning.opponents import MinimaxPlayer, PolicyPlayer, RandomPlayer, play_match
from hrl_tasks.policies.policy_map import PolicySpec

TARGET = 0.85


def first_ppo_second_dqn(agent_id, episode):
    return "ppo" if agent_id == "player_1" else "dqn"


def experiment(seed: int) -> dict:
    return {
        "env": "tictactoe_v3",
        "seed": seed,
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 16,
        "min_steps_per_report": 2000,
        "policies": {
            "ppo": PolicySpec("ppo", {"train_batch_size": 2048, "lr": 1e-3, "ent_coef": 0.01,
                                      "num_sgd_iter": 6, "minibatch_size": 256, "gamma": 0.99}),
            "dqn": PolicySpec("dqn", {"lr": 5e-4, "buffer_size": 50_000, "learning_starts": 2000,
                                      "epsilon_steps": 100_000, "epsilon_end": 0.05,
                                      "train_steps_per_round": 64, "train_batch_size": 128,
                                      "target_update_every": 256, "gamma": 0.99}),
        },
        "policy_mapping_fn": first_ppo_second_dqn,
    }  # fmt: skip


def against_random(algo, games: int, seed: int) -> dict:
    game, rng = make_game("tictactoe_v3"), np.random.default_rng(seed)
    out = {}
    for pid, seat in (("ppo", 0), ("dqn", 1)):
        result = play_match(game, PolicyPlayer(algo, pid), RandomPlayer(), games, rng, seat=seat)
        out[pid] = {**result, "win_or_draw": (result["wins"] + result["draws"]) / games}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument(
        "--margin", type=float, default=0.03,
        help="stop when both evaluations are this much above the target (their noise: "
        "about 0.017 at 400 games); the fresh games after it decide",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-on", action="store_true",
        help="go on training for all --minutes after the target is met (default: stop there)",
    )  # fmt: skip
    parser.add_argument("--out", default="runs/bench-multiagent-tictactoe")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    algo = get_algorithm("composition")(experiment(args.seed))
    start, rows, reached = time.perf_counter(), [], None
    try:
        while time.perf_counter() - start < args.minutes * 60:
            result = algo.train()
            row = {
                "iteration": result["iteration"],
                "time_s": round(time.perf_counter() - start, 1),
                "env_steps": result["env_steps_sampled"],
                **{k: v for k, v in result.items() if k.startswith("policy_return_mean/")},
            }
            if result["iteration"] % args.eval_every == 0:
                scores = against_random(algo, args.games, args.seed + result["iteration"])
                row.update({f"vs_random/{pid}": s["win_or_draw"] for pid, s in scores.items()})
                print(json.dumps(row), flush=True)
                if reached is None and all(s["win_or_draw"] >= TARGET + args.margin
                                           for s in scores.values()):  # fmt: skip
                    reached = row
                    if not args.train_on:
                        rows.append(row)
                        break
            rows.append(row)
        algo.save(out / "checkpoint.hrl")
        final = against_random(algo, 2 * args.games, args.seed + 1)
        game, rng = make_game("tictactoe_v3"), np.random.default_rng(args.seed)
        perfect = {
            pid: play_match(game, PolicyPlayer(algo, pid), MinimaxPlayer(), args.games, rng,
                            seat=seat)["score"]
            for pid, seat in (("ppo", 0), ("dqn", 1))
        }  # fmt: skip
    finally:
        algo.stop()
    with open(out / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    print(json.dumps({
        "bench": "multiagent_tictactoe",
        "target_win_or_draw": TARGET,
        "reached": reached is not None,
        "reached_time_s": reached and reached["time_s"],
        "reached_env_steps": reached and reached["env_steps"],
        "time_s": rows[-1]["time_s"],
        "env_steps": rows[-1]["env_steps"],
        "ppo_first_vs_random": final["ppo"]["win_or_draw"],
        "dqn_second_vs_random": final["dqn"]["win_or_draw"],
        "ppo_first_score_vs_minimax": perfect["ppo"],
        "dqn_second_score_vs_minimax": perfect["dqn"],
        "games": 2 * args.games,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
