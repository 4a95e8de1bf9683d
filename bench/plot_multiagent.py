"""Curves of the multi-agent benches, for docs/learning.md.

    python bench/plot_multiagent.py --ttt runs/bench-multiagent-tictactoe \\
        --c4 runs/bench-selfplay-connect-four --rooms runs/bench-hierarchical-rooms \\
        --mappo runs/bench-mappo-spread=clip0.5 --out docs/learning

Each argument is a bench's ``--out`` directory; missing ones are skipped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(series: dict[str, tuple[list, list]], path: Path, title: str, xlabel: str,
         ylabel: str, target: float | None = None) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, label=label)
    if target is not None:
        ax.axhline(target, linestyle="--", color="grey", label=f"target {target:g}")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"wrote {path}")


def evaluated(data: list[dict], key: str, x: str = "env_steps") -> tuple[list, list]:
    points = [(r[x], r[key]) for r in data if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("ttt", "c4", "rooms"):
        parser.add_argument(f"--{name}", type=Path)
    parser.add_argument("--mappo", type=Path, nargs="+", metavar="DIR[=LABEL]",
                        help="runs of bench/mappo_spread.py; a label names each's settings")  # fmt: skip
    parser.add_argument("--mappo-target", type=float, help="the target return line (printed "
                        "by bench/mappo_spread.py)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/learning"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.ttt and (args.ttt / "metrics.jsonl").exists():
        data = rows(args.ttt / "metrics.jsonl")
        plot({"PPO, first player": evaluated(data, "vs_random/ppo"),
              "DQN, second player": evaluated(data, "vs_random/dqn")},
             args.out / "composition-tictactoe.png", "PPO and DQN trained together, tic-tac-toe",
             "env steps", "wins or draws against random", 0.85)  # fmt: skip
    if args.c4 and (args.c4 / "metrics.jsonl").exists():
        data = rows(args.c4 / "metrics.jsonl")
        xs, ys = evaluated(data, "win_rate/random", x="time_s")
        plot({"PPO self-play (main policy)": ([x / 60 for x in xs], ys)},
             args.out / "selfplay-connect4.png", "PPO self-play, Connect Four",
             "minutes", "wins against random", 0.9)  # fmt: skip
    if args.rooms and (args.rooms / "flat.jsonl").exists():
        series = {
            label: evaluated(rows(args.rooms / f"{name}.jsonl"), "success")
            for name, label in (("flat", "flat PPO"), ("hierarchical", "high + low PPO"))
            if (args.rooms / f"{name}.jsonl").exists()
        }
        plot(series, args.out / "hierarchical-rooms.png", "Rooms (4 x 4, 500 steps)",
             "env steps", "episodes reaching the goal")  # fmt: skip
    if args.mappo:
        series = {}
        for item in args.mappo:
            directory, _, settings = str(item).partition("=")
            for name, label in (("ippo", "independent PPO"), ("mappo", "central critic")):
                path = Path(directory) / f"{name}.jsonl"
                if path.exists():
                    series[f"{label}, {settings}" if settings else label] = evaluated(
                        rows(path), "episode_return_mean", x="env_steps_sampled"
                    )
        plot(series, args.out / "mappo-spread.png", "simple_spread (mpe2), 3 agents",
             "env steps", "episode return (sum over agents)", args.mappo_target)  # fmt: skip


if __name__ == "__main__":
    main()
