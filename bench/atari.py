"""Atari: IMPALA and APPO throughput on ALE/Breakout-v5, bytes per frame, and a learning smoke.

Throughput (the default): env steps per second (each one 4 emulator frames:
the standard wrappers of `hrl_tasks.envs.atari` skip frames) of IMPALA and
APPO with 2 rollout workers of 4 envs each, the Nature CNN (``hidden=()``),
train batches of 128 steps and their other keys at their defaults, each on its
own embedded cluster, train() called until warm and then for ``--seconds``.
The baseline is a single-process loop of the same vector of 4 wrapped envs
stepped with the actions of the same CNN policy (torch, one thread, as a
rollout worker acts), measured before and after the algorithms. Also the
bytes per env step of an encoded rollout batch (what a worker sends): the
``obs`` and ``next_obs`` columns are uint8 ``(4, 84, 84)``, 28,224 bytes each.

Smoke (``--smoke``): IMPALA trains for ``--minutes`` (episodic life, clipped
rewards), then its stochastic policy plays ``--episodes`` full games (all
lives, the game's own score) on seeds 0, 1, ..., as does a uniformly random
policy on the same seeds. Mean returns of both, and whether IMPALA's is higher.

Prints one JSON line.

    python bench/atari.py [--seconds 30]
    python bench/atari.py --smoke [--minutes 4] [--episodes 20]
"""

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

from hrl_tasks.algorithms import ALGORITHMS
from hrl_tasks.data import encode
from hrl_tasks.policies import IMPALAPolicy, IMPALAPolicyConfig
from hrl_tasks.rollout import RolloutWorker, make_env

ENV = "ALE/Breakout-v5"
ENVS = 4
THROUGHPUT_ALGORITHMS = ("impala", "appo")
CONFIG = {
    "env": ENV,
    "seed": 0,
    "num_workers": 2,
    "num_envs_per_worker": ENVS,
    "rollout_fragment_length": 32,  # 128 env steps per sample call
    "train_batch_size": 128,
    "hidden": (),  # the Nature CNN's 512 features, then the heads
}
SMOKE_CONFIG = {
    **CONFIG,
    "env_config": {"terminal_on_life_loss": True},  # a lost ball ends the episode
    "train_batch_size": 256,
    "lr": 5e-4,
    "ent_coef": 0.01,
}
EVALUATION_ENV_CONFIG = {"clip_rewards": False}  # full games, the game's score
WARMUP_ITERATIONS = 2


def cnn_policy() -> IMPALAPolicy:
    """The policy the rollout workers act with: the Nature CNN, torch."""
    env = make_env(ENV)
    spaces = env.single_observation_space, env.single_action_space
    env.close()
    return IMPALAPolicy(*spaces, IMPALAPolicyConfig(hidden=(), seed=0))


def plain_loop(seconds: float) -> float:
    """Env steps per second of the vector env stepped with the CNN policy's actions."""
    policy = cnn_policy()
    envs = make_env(ENV, num_envs=ENVS, seed=0)
    obs, _ = envs.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions, _ = policy.compute_actions(obs)
        obs, *_ = envs.step(actions)
        steps += ENVS
    elapsed = time.perf_counter() - start
    envs.close()
    return steps / elapsed


def batch_bytes() -> dict:
    """Bytes per env step of an encoded rollout batch, in all and per observation column."""
    worker = RolloutWorker(ENV, cnn_policy(), ENVS, CONFIG["rollout_fragment_length"], seed=0)
    batch, _ = worker.sample()
    worker.close()
    return {
        "encoded_bytes_per_step": round(len(encode(batch)) / len(batch)),
        "obs_bytes_per_step": batch["obs"].nbytes // len(batch),
        "obs_dtype": str(batch["obs"].dtype),
        "columns": list(batch.columns),
    }


def measure(name: str, seconds: float) -> dict:
    """Build the algorithm, train() until warm, then for ``seconds``: steps per second."""
    algo = ALGORITHMS[name](**CONFIG)
    try:
        for _ in range(WARMUP_ITERATIONS):
            first = algo.train()
        result, start = first, time.perf_counter()
        while time.perf_counter() - start < seconds:
            result = algo.train()
        elapsed = time.perf_counter() - start
    finally:
        algo.stop()
    time.sleep(2.0)  # let the worker processes exit before the next measurement
    sampled = result["env_steps_sampled"] - first["env_steps_sampled"]
    trained = result["env_steps_trained"] - first["env_steps_trained"]
    return {
        "sampled_steps_per_s": round(sampled / elapsed),
        "trained_steps_per_s": round(trained / elapsed),
        "wall_s": round(elapsed, 1),
    }


def throughput(seconds: float) -> dict:
    before = plain_loop(seconds)
    runs = {name: measure(name, seconds) for name in THROUGHPUT_ALGORITHMS}
    after = plain_loop(seconds)
    baseline = (before + after) / 2
    figures = {"baseline_steps_per_s": [round(before), round(after)]}
    for name, run in runs.items():
        figures[name] = {
            **run,
            "sampled_vs_baseline": round(run["sampled_steps_per_s"] / baseline, 3),
        }
    return {"seconds": seconds, **figures, **batch_bytes()}


def play(act, episodes: int) -> list[float]:
    """The game's score of the first episode of each of ``episodes`` envs, seeded 0, 1, ...;
    ``act(obs)`` gives the actions of the whole vector."""
    envs = make_env(ENV, num_envs=episodes, seed=0, env_config=EVALUATION_ENV_CONFIG)
    obs, _ = envs.reset()
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        obs, rewards, terminateds, truncateds, _ = envs.step(act(obs))
        returns += np.where(done, 0.0, rewards)
        done |= terminateds | truncateds
    envs.close()
    return returns.tolist()


def smoke(minutes: float, episodes: int) -> dict:
    """Train IMPALA for ``minutes``, then play against a random policy on the same seeds."""
    algo = ALGORITHMS["impala"](**SMOKE_CONFIG)
    start, result = time.perf_counter(), None
    try:
        while time.perf_counter() - start < 60 * minutes:
            result = algo.train()
        policy = algo.policy
    finally:
        algo.stop()
    trained_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    num_actions = int(policy.action_space.n)
    learned = play(lambda obs: policy.compute_actions(obs, explore=True)[0], episodes)
    random = play(lambda obs: rng.integers(num_actions, size=len(obs)), episodes)
    learned_mean, random_mean = float(np.mean(learned)), float(np.mean(random))
    return {
        "algorithm": "impala",
        "train_s": round(trained_s),
        "env_steps_sampled": result["env_steps_sampled"],
        "env_steps_trained": result["env_steps_trained"],
        "training_episode_return_mean": round(result["episode_return_mean"], 2),
        "episodes": episodes,
        "return_mean": round(learned_mean, 2),
        "random_return_mean": round(random_mean, 2),
        "returns": learned,
        "random_returns": random,
        "beats_random": learned_mean > random_mean,
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="measuring time per run")
    parser.add_argument("--smoke", action="store_true", help="the learning smoke instead")
    parser.add_argument("--minutes", type=float, default=4.0, help="smoke: training time")
    parser.add_argument("--episodes", type=int, default=20, help="smoke: evaluation games")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as rollout processes and the learner (learner_threads=1) do
    figures = smoke(args.minutes, args.episodes) if args.smoke else throughput(args.seconds)
    print(
        json.dumps(
            {
                "bench": "atari_smoke" if args.smoke else "atari_throughput",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                "env": ENV,
                "envs_per_worker": ENVS,
                **figures,
            }
        )
    )


if __name__ == "__main__":
    main()
