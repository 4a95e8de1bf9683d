"""Learning, measured: does each algorithm reach its reward threshold, and at what cost?

Runs each algorithm with the settings below on the embedded cluster until the
mean return of the last 20 episodes reaches the threshold or the step budget
runs out. Writes a learning curve per run into docs/learning/ and prints one
JSON line with env steps and wall time per run. Not part of CI.

Game runs (AlphaZero) train for at most their minutes, stopping early once an
evaluation meets the targets; then the trained agent, loaded from its
checkpoint as a user would, plays fresh matches against each opponent (half of
the games moving first), and the curve is the win rate against each opponent
over training time.

    python bench/learning.py [--only ppo-cartpole a2c-cartpole] [--seed 0]
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

import hrl_tasks
from hrl_tasks.plotting import plot_learning_curve

CARTPOLE = {"num_workers": 2, "num_envs_per_worker": 4}
RUNS = {
    "ppo-cartpole": dict(
        algorithm="ppo", env="CartPole-v1", threshold=450.0, budget=300_000,
        config={**CARTPOLE, "rollout_fragment_length": 32, "train_batch_size": 256,
                "minibatch_size": 256, "num_sgd_iter": 20, "lr": 1e-3, "gamma": 0.98,
                "lam": 0.8, "ent_coef": 0.0},
    ),
    "a2c-cartpole": dict(
        algorithm="a2c", env="CartPole-v1", threshold=450.0, budget=500_000,
        config={**CARTPOLE, "rollout_fragment_length": 8, "train_batch_size": 64,
                "lr": 7e-4, "gamma": 0.99, "ent_coef": 0.0, "normalize_advantages": False},
    ),
    "a3c-cartpole": dict(
        algorithm="a3c", env="CartPole-v1", threshold=450.0, budget=500_000,
        config={**CARTPOLE, "rollout_fragment_length": 8, "lr": 7e-4, "gamma": 0.99,
                "ent_coef": 0.0, "min_steps_per_report": 1000},
    ),
    "ppo-pendulum": dict(
        algorithm="ppo", env="Pendulum-v1", threshold=-300.0, budget=600_000,
        config={"num_workers": 2, "num_envs_per_worker": 4, "rollout_fragment_length": 256,
                "train_batch_size": 2048, "minibatch_size": 64, "num_sgd_iter": 10,
                "lr": 1e-3, "gamma": 0.9, "lam": 0.95, "ent_coef": 0.0, "clip": 0.2},
    ),
    "dqn-cartpole": dict(
        algorithm="dqn", env="CartPole-v1", threshold=450.0, budget=150_000,
        config={**CARTPOLE},  # defaults: rl-zoo's rounds, lr 5e-4, double Q, dueling
    ),
    "rainbow-cartpole": dict(
        algorithm="rainbow", env="CartPole-v1", threshold=450.0, budget=150_000,
        config={**CARTPOLE},  # defaults: DQN's rounds with every part of Rainbow on
    ),
    "apex-cartpole": dict(
        algorithm="apex", env="CartPole-v1", threshold=450.0, budget=600_000,
        config={**CARTPOLE, "training_intensity": 4.0},  # 2 replay shards, 3-step targets, 16
        # batches a call; 4 replayed rows per env step (6 seeds of 6 solve, docs/learning.md)
    ),
    "impala-cartpole": dict(
        algorithm="impala", env="CartPole-v1", threshold=450.0, budget=400_000,
        config={**CARTPOLE},  # defaults: 2 requests in flight per worker, V-trace
    ),
    "appo-cartpole": dict(
        algorithm="appo", env="CartPole-v1", threshold=450.0, budget=400_000,
        config={**CARTPOLE},  # defaults: IMPALA's, clip 0.2, one step per train batch
    ),
    "mpc-pendulum": dict(
        algorithm="mpc", env="Pendulum-v1", threshold=-200.0, budget=10_000,
        config={},  # PETS defaults: 5 members, CEM 400 x 5 over 25 steps; last-10 mean
    ),
    "sac-pendulum": dict(
        algorithm="sac", env="Pendulum-v1", threshold=-250.0, budget=20_000,
        config={},  # Stable-Baselines3's defaults: one step of 256 rows per env step
    ),
    "td3-pendulum": dict(
        algorithm="td3", env="Pendulum-v1", threshold=-250.0, budget=20_000,
        config={},  # Stable-Baselines3's defaults: one critic step of 256 rows per env step
    ),
    "sac-cartpole": dict(
        algorithm="sac", env="CartPole-v1", threshold=450.0, budget=200_000,
        config={"hidden": (64, 64), "train_batch_size": 64, "training_intensity": 64.0,
                "learning_starts": 1000, "target_entropy": 0.1},  # discrete actions; one step
        # of 64 rows per env step; the default target entropy (0.89 log 2 nats) kept the
        # sampled actions near uniform: training returns 150-250, greedy 500 (docs/learning.md)
    ),
    "es-cartpole": dict(
        algorithm="es", env="CartPole-v1", threshold=450.0, budget=600_000,
        config={"num_workers": 2},  # 32 antithetic pairs per iteration
    ),
}  # fmt: skip

GAMES = {
    # Never loses to perfect play in 50 games, playing first and second, within 10 minutes
    # (the criterion of OpenSpiel's AlphaZero example).
    "alphazero-tictactoe": dict(
        env="tictactoe_v3", minutes=10,
        config={"num_workers": 2, "evaluation_interval": 2, "evaluation_games": 50,
                "opponents": ("minimax", "random")},
        targets={"loss_rate/minimax": ("<=", 0.0)},
        final={"minimax": 50, "random": 100},
    ),
    # >= 95% against random, >= 60% against UCT-MCTS with 1,000 simulations and at least
    # half the points against depth-4 alpha-beta, within 60 minutes.
    "alphazero-connect4": dict(
        env="connect_four_v3", minutes=60,
        config={"num_workers": 2, "simulations": 200, "evaluation_simulations": 400,
                "games_per_iteration": 8, "temperature_moves": 10, "channels": 64, "blocks": 3,
                "updates_per_iteration": 60, "evaluation_interval": 10, "evaluation_games": 20,
                "opponents": ("random", "uct-1000", "alphabeta-4"),
                "evaluation_time_s": 1800},  # every game counts, however long
        targets={"win_rate/random": (">=", 0.95), "win_rate/uct-1000": (">=", 0.6),
                 "score/alphabeta-4": (">=", 0.5)},
        final={"random": 100, "uct-1000": 50, "alphabeta-4": 50},
    ),
}  # fmt: skip


def met(result: dict, targets: dict) -> bool:
    """Whether every target holds in ``result`` (an iteration with an evaluation)."""
    checks = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
    return all(k in result and checks[op](result[k], v) for k, (op, v) in targets.items())


def game_run(name: str, spec: dict, seed: int, out: Path) -> dict:
    import numpy as np

    from hrl_tasks.algorithms import AlphaZero
    from hrl_tasks.planning.opponents import parse_opponent, play_match
    from hrl_tasks.plotting import plot_win_rates

    algo = AlphaZero({**spec["config"], "env": spec["env"], "seed": seed})
    metrics, start = [], time.perf_counter()
    try:
        while time.perf_counter() - start < spec["minutes"] * 60:
            result = algo.train()
            metrics.append(result)
            if met(result, spec["targets"]):
                break
        wall = time.perf_counter() - start
        checkpoint = algo.save(out / f"{name}.hrl")
    finally:
        algo.stop()
    with (out / f"{name}.jsonl").open("w") as log:  # before the matches, which take long
        log.writelines(json.dumps(m) + "\n" for m in metrics)
    curve = plot_win_rates(metrics, out / f"{name}.png", title=f"{name} (seed {seed})")
    agent = hrl_tasks.load(checkpoint)  # as a user would: no cluster, search with the network
    game = agent.game

    class Agent:
        name = "alphazero"

        def act(self, game, state, rng):
            obs = {"observation": game.observation(state), "action_mask": game.legal_mask(state)}
            return agent.compute_single_action(obs)

    rng = np.random.default_rng(seed + 1)
    final = {
        opponent: play_match(game, Agent(), parse_opponent(opponent), games, rng)
        for opponent, games in spec["final"].items()
    }
    last = metrics[-1]
    return {
        "run": name,
        "targets_met_in_training": met(last, spec["targets"]),
        "training_minutes": round(wall / 60, 2),
        "iterations": last["iteration"],
        "self_play_games": last["games"],
        "positions": last["env_steps_sampled"],
        "simulations_per_s": round(last["simulations_per_s"]),
        "last_evaluation": {k: v for k, v in last.items() if "/" in k and "info" not in k},
        "final_matches": final,
        "curve": str(curve),
    }


def run(name: str, spec: dict, seed: int, out: Path) -> dict:
    metrics = []
    start = time.perf_counter()
    algo, result = hrl_tasks.train(
        spec["algorithm"],
        env=spec["env"],
        stop={"episode_return_mean": spec["threshold"], "env_steps_sampled": spec["budget"]},
        callback=metrics.append,
        seed=seed,
        **spec["config"],
    )
    wall = time.perf_counter() - start
    evaluation = algo.evaluate(episodes=10)
    algo.stop()
    curve = plot_learning_curve(
        {name: metrics},
        out / f"{name}.png",
        title=f"{name} (seed {seed})",
        threshold=spec["threshold"],
    )
    return {
        "run": name,
        "solved": result["episode_return_mean"] >= spec["threshold"],
        "threshold": spec["threshold"],
        "final_return_mean_20": round(result["episode_return_mean"], 1),
        "evaluation_return_mean": round(evaluation["evaluation_return_mean"], 1),
        "env_steps": result["env_steps_sampled"],
        "budget": spec["budget"],
        "wall_s": round(wall, 1),
        "curve": str(curve),
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--only", nargs="+", choices=sorted({**RUNS, **GAMES}),
        help="runs to do (default all but the games)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=JSON",
                        help="override a config key of the runs, e.g. training_intensity=4")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/learning"))
    args = parser.parse_args()
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    for spec in RUNS.values():
        spec["config"] = {**spec["config"], **overrides}
    results = [
        game_run(name, GAMES[name], args.seed, args.out)
        if name in GAMES
        else run(name, RUNS[name], args.seed, args.out)
        for name in args.only or RUNS
    ]
    print(
        json.dumps(
            {
                "bench": "learning",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                "seed": args.seed,
                "overrides": overrides,
                "runs": results,
            }
        )
    )


if __name__ == "__main__":
    main()
