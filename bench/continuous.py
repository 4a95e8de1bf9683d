"""SAC, TD3 and PPO on MuJoCo against Stable-Baselines3, rl-zoo's settings on both sides.

Each run trains for ``--steps`` env steps (200,000 by default) with rl-zoo's
HalfCheetah settings (learning from 10,000 uniformly random steps on; one gradient
step of 256 rows per env step; SAC: lr 3e-4, (256, 256); TD3: lr 1e-3, (400, 300),
exploration noise 0.1), then plays 10 episodes with deterministic actions. The
wall time is the whole run as a user waits for it, the cluster's start-up
included. The two sides alternate seed by seed, so that a machine whose speed
drifts slows both alike. Prints one JSON line and draws the curves (mean return
of the last 10 training episodes against env steps) into docs/learning/. Each run is
kept as it ends in ``docs/learning/<algorithm>-<env>-<steps>-runs.jsonl``, dated with
its commit; the figures and the plot are of every run kept there (the latest of each
side and seed), so that runs made on different days make one comparison.

PPO (``--algorithm ppo``: Hopper-v5, 500,000 steps by default) takes rl-zoo's
Hopper settings: one env, 512 steps per update, 5 epochs of minibatches of 32,
ReLU (256, 256) networks, log-std from -2, observations and rewards normalized by
running statistics (Stable-Baselines3's ``VecNormalize``; ``normalize_observations``
and ``normalize_rewards`` here). Stable-Baselines3 initializes those networks with
torch's default (``ortho_init=False``), hrl_tasks orthogonally, as CleanRL.

Needs ``pip install -e ".[bench,mujoco]"``.

    python bench/continuous.py [--algorithm sac] [--env HalfCheetah-v5] [--seeds 0 1]
    python bench/continuous.py --algorithm ppo --seeds 0
"""

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WINDOW = 10  # training episodes in a curve's point
RL_ZOO = {  # rl-zoo's HalfCheetah settings, named as each library names them
    "sac": {"sb3": {"learning_starts": 10_000},
            "hrl": {"learning_starts": 10_000}},
    "td3": {"sb3": {"learning_starts": 10_000, "learning_rate": 1e-3, "batch_size": 256,
                    "policy_kwargs": {"net_arch": [400, 300]}},
            "hrl": {"learning_starts": 10_000, "lr": 1e-3, "train_batch_size": 256,
                    "hidden": (400, 300)}},
    "ppo": {"sb3": {"batch_size": 32, "n_steps": 512, "gamma": 0.999,
                    "learning_rate": 9.80828e-05, "ent_coef": 0.00229519, "clip_range": 0.2,
                    "n_epochs": 5, "gae_lambda": 0.99, "max_grad_norm": 0.7,
                    "vf_coef": 0.835671},
            "hrl": {"num_workers": 1, "num_envs_per_worker": 1, "rollout_fragment_length": 512,
                    "train_batch_size": 512, "minibatch_size": 32, "num_sgd_iter": 5,
                    "gamma": 0.999, "lr": 9.80828e-05, "ent_coef": 0.00229519, "clip": 0.2,
                    "lam": 0.99, "grad_clip": 0.7, "vf_coef": 0.835671, "hidden": (256, 256),
                    "activation": "relu", "log_std_init": -2.0,
                    "normalize_observations": True, "normalize_rewards": True}},
}  # fmt: skip
DEFAULTS = {"sac": ("HalfCheetah-v5", 200_000), "td3": ("HalfCheetah-v5", 200_000),
            "ppo": ("Hopper-v5", 500_000)}  # fmt: skip
"""Each algorithm's env and steps when the command line names none."""


def hrl_run(algorithm: str, env: str, seed: int, steps: int, settings: dict) -> dict:
    import hrl_tasks

    curve = []
    start = time.perf_counter()

    def record(result):
        curve.append((result["env_steps_sampled"], result["episode_return_mean"]))

    algo, result = hrl_tasks.train(
        algorithm, env, stop={"env_steps_sampled": steps}, callback=record, seed=seed,
        metrics_smoothing_episodes=WINDOW, **settings,
    )  # fmt: skip
    trained_s = time.perf_counter() - start
    evaluation = algo.evaluate(episodes=10)["evaluation_return_mean"]
    algo.stop()
    return {"seconds": trained_s, "env_steps": result["env_steps_sampled"],
            "evaluation_return": evaluation, "train_return": result["episode_return_mean"],
            "curve": curve}  # fmt: skip


def sb3_run(algorithm: str, env: str, seed: int, steps: int, settings: dict, threads: int) -> dict:
    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    curve = []
    # torch's threads as a Stable-Baselines3 user has them (hrl_tasks' run, in this
    # process, set the driver's to its learner_threads).
    torch.set_num_threads(threads)

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % 1000 == 0 and self.model.ep_info_buffer:
                returns = [e["r"] for e in list(self.model.ep_info_buffer)[-WINDOW:]]
                curve.append((self.num_timesteps, float(np.mean(returns))))
            return True

    start = time.perf_counter()
    cls = getattr(stable_baselines3, algorithm.upper())
    extra = {}
    if algorithm == "td3":
        extra["action_noise"] = NormalActionNoise(np.zeros(6), 0.1 * np.ones(6))
    if algorithm == "ppo":  # rl-zoo's `normalize: true` and policy_kwargs
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize

        env = VecNormalize(make_vec_env(env, n_envs=1, seed=seed), gamma=settings["gamma"])
        extra["policy_kwargs"] = {"log_std_init": -2, "ortho_init": False,
                                  "activation_fn": torch.nn.ReLU,
                                  "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
    model = cls("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **settings, **extra)
    model.learn(total_timesteps=steps, callback=Curve())
    trained_s = time.perf_counter() - start
    if algorithm == "ppo":
        model.get_env().training = False  # statistics frozen, as the learner's copy is here
    evaluation, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=10, deterministic=True)
    returns = [e["r"] for e in list(model.ep_info_buffer)[-WINDOW:]]
    return {"seconds": trained_s, "env_steps": int(model.num_timesteps),
            "evaluation_return": float(evaluation), "train_return": float(np.mean(returns)),
            "curve": curve}  # fmt: skip


def plot(runs: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (side, seed), run in sorted(runs.items()):
        steps, returns = zip(*run["curve"], strict=True) if run["curve"] else ((), ())
        ax.plot(steps, returns, label=f"{side}, seed {seed}",
                linestyle="-" if side == "hrl_tasks" else "--")  # fmt: skip
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"mean return, last {WINDOW} episodes")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def keep_run(path: Path, side: str, seed: int, run: dict) -> None:
    """Appends the run (its curve too) to ``path`` as it ends, dated with the commit, so
    that runs made on different days, or by a bench stopped midway, make one figure."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    line = {"side": side, "seed": seed, "date": time.strftime("%Y-%m-%d"), "commit": commit,
            **run}  # fmt: skip
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    brief = {k: v for k, v in line.items() if k != "curve"}
    print(json.dumps(brief), file=sys.stderr, flush=True)


def kept_runs(path: Path) -> dict:
    """The latest run of each (side, seed) in ``path``."""
    runs = {}
    if path.exists():
        for text in path.read_text().splitlines():
            line = json.loads(text)
            runs[line["side"], line["seed"]] = line
    return runs


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--algorithm", choices=sorted(RL_ZOO), default="sac")
    parser.add_argument("--env", help="default: HalfCheetah-v5 (SAC, TD3), Hopper-v5 (PPO)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, help="default: 200,000 (SAC, TD3), 500,000 (PPO)")
    parser.add_argument("--sides", nargs="+", choices=["hrl_tasks", "sb3"],
                        default=["hrl_tasks", "sb3"])  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/learning"))
    parser.add_argument("--hrl-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key of the hrl_tasks side on top of rl-zoo's (Python "
                             "literal values), e.g. learner_threads=2; kept with the run")  # fmt: skip
    args = parser.parse_args()
    args.env = args.env or DEFAULTS[args.algorithm][0]
    args.steps = args.steps or DEFAULTS[args.algorithm][1]
    import torch

    threads = torch.get_num_threads()  # torch's default here, before hrl_tasks sets its own
    import hrl_tasks.algorithms  # noqa: F401  (imports are not timed, on either side)

    if "sb3" in args.sides:
        import stable_baselines3  # noqa: F401
    settings = RL_ZOO[args.algorithm]
    extra = {}
    for item in args.hrl_set:
        key, _, value = item.partition("=")
        try:
            extra[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            extra[key] = value
    name = f"{args.algorithm}-{args.env.split('-')[0].lower()}"
    args.out.mkdir(parents=True, exist_ok=True)
    kept = args.out / f"{name}-{args.steps}-runs.jsonl"
    for seed in args.seeds:
        if "hrl_tasks" in args.sides:
            run = hrl_run(args.algorithm, args.env, seed, args.steps, {**settings["hrl"], **extra})
            keep_run(kept, "hrl_tasks", seed, {**run, **({"hrl_set": extra} if extra else {})})
        if "sb3" in args.sides:
            run = sb3_run(args.algorithm, args.env, seed, args.steps, settings["sb3"], threads)
            keep_run(kept, "sb3", seed, {**run, "torch_threads": threads})
    runs = kept_runs(kept)  # with those of earlier days
    default_steps = args.steps == DEFAULTS[args.algorithm][1]
    curve = args.out / (f"{name}.png" if default_steps else f"{name}-{args.steps}.png")
    plot(runs, curve, f"{args.algorithm.upper()} on {args.env}, {args.steps:,} steps")

    def side(label):
        mine = [r for (s, _), r in runs.items() if s == label]
        if not mine:
            return None
        return {"seeds": [s for (label_, s) in runs if label_ == label],
                "dates": [f"{r['date']} ({r['commit']})" for r in mine],
                "seconds": [round(r["seconds"], 1) for r in mine],
                "evaluation_return": [round(r["evaluation_return"], 1) for r in mine],
                "train_return": [round(r["train_return"], 1) for r in mine],
                "mean_evaluation_return": round(float(np.mean([r["evaluation_return"]
                                                               for r in mine])), 1),
                "mean_seconds": round(float(np.mean([r["seconds"] for r in mine])), 1)}  # fmt: skip

    ours, theirs = side("hrl_tasks"), side("sb3")
    figures = {
        "bench": "continuous", "date": time.strftime("%Y-%m-%d"), "algorithm": args.algorithm,
        "env": args.env, "steps": args.steps, "seeds": args.seeds,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "hrl_tasks": ours, "stable_baselines3": theirs, "curve": str(curve),
    }  # fmt: skip
    if ours and theirs:
        figures["seconds_ratio_hrl_over_sb3"] = round(
            ours["mean_seconds"] / theirs["mean_seconds"], 3
        )
        figures["return_difference_hrl_minus_sb3"] = round(
            ours["mean_evaluation_return"] - theirs["mean_evaluation_return"], 1
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
