"""Offline learning from recorded experience: BC's return, and reading at scale.

``--bc``: PPO trained on CartPole-v1 to a mean return of 475, then 50,000 steps of
its policy recorded by a `RolloutWorker` with ``record_experience`` (sampling as the
run did, explore on), then BC with its defaults trained from that recording until
an evaluation of 10 greedy episodes reaches 450 or 30 iterations pass. Prints the
recording's mean return and BC's evaluations.

``--pendulum``: 100,000 recorded Pendulum-v1 transitions, half from a SAC policy
trained to a mean return of at least -200 (explore on), half from uniform random
actions; then BC, MARWIL, CQL and IQL trained from them with their defaults for
``--updates`` gradient steps each, and d3rlpy 2.8's CQL and IQL on the same rows
(converted to its ``MDPDataset``, run in its own virtual environment under ``--venv``,
created on the first run), each scored over 10 greedy episodes (``--learners`` picks
some). Targets: CQL and IQL each >= BC + 100 and >= d3rlpy's same algorithm less 10%
of its magnitude; MARWIL >= BC.

``--scale``: a recording of 10 million CartPole-shaped rows (100 files of 100,000,
written once under ``--data``), then BC trained from it for ``--minutes``: rows
trained per second, the share of the time the learner waited for a file, and then
the rows per second the same workers read and deliver with no learner to wait for
(target: at least 2x the rows trained, so reading never holds the learner back);
the driver's resident memory sampled every 10 s, with its slope over the second
half and the slope's standard error (target: at most 1 MB per 10 minutes).

    python bench/offline.py --bc
    python bench/offline.py --pendulum [--updates 20000] [--learners bc iql d3rlpy_iql]
    python bench/offline.py --scale [--minutes 20] [--data /tmp/offline-10m]
    python bench/offline.py --ope [--episodes 1000] [--behaviour-random 0.5] [--target-random 0.3]

``--ope``: off-policy estimates of a known policy. On CartPole-v1 a controller
(push toward where the pole falls, from its angle and angular velocity) takes a uniformly random
action with probability ``--behaviour-random`` (0.5) to record ``--episodes`` (1,000)
episodes with each action's log-probability; the target is the same controller with
``--target-random`` (0.3), whose discounted return (gamma 0.99) is measured over
1,000 episodes of its own. The estimators of `hrl_tasks.policies.off_policy_estimation`
(IS, WIS, and DR with ``--fqe-steps`` (20,000) steps of fitted Q evaluation) estimate
it from the recording alone.
Target: each within 10% of the measured return. The recording's own discounted
return is printed beside them: what an estimate that ignored the policies'
difference would say.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip


def record_trained_ppo(directory: Path, steps: int, seed: int) -> dict:
    import hrl_tasks
    from hrl_tasks.rollout import RolloutWorker

    algo, result = hrl_tasks.train("ppo", "CartPole-v1", stop={"episode_return_mean": 475},
                                   seed=seed)  # fmt: skip
    policy = algo.policy.inference_copy()
    algo.stop()
    worker = RolloutWorker("CartPole-v1", policy, num_envs=8, rollout_fragment_length=250,
                           seed=seed + 1, record_experience=str(directory))  # fmt: skip
    returns, sampled = [], 0
    while sampled < steps:
        batch, metrics = worker.sample()
        sampled += len(batch)
        returns += metrics["episode_returns"]
    worker.close()
    return {"ppo_return": result["episode_return_mean"], "recorded_steps": sampled,
            "recorded_episode_return_mean": float(np.mean(returns))}  # fmt: skip


def bc_run(args) -> dict:
    import hrl_tasks

    with tempfile.TemporaryDirectory() as directory:
        recording = record_trained_ppo(Path(directory), 50_000, args.seed)
        curve, start = [], time.perf_counter()
        algo, last = hrl_tasks.train("bc", "CartPole-v1", experience_input=directory,
                                     stop={"episode_return_mean": 450, "iteration": 30},
                                     seed=args.seed, evaluation_episodes=10,
                                     callback=lambda r: curve.append(
                                         (r["iteration"], r["env_steps_trained"],
                                          r["episode_return_mean"])))  # fmt: skip
        seconds = time.perf_counter() - start
        final = algo.evaluate(episodes=100)["evaluation_return_mean"]
        algo.stop()
    return {"bench": "offline_bc", "date": time.strftime("%Y-%m-%d"), "commit": args.commit,
            **recording, "bc_seconds": round(seconds, 1), "bc_iterations": last["iteration"],
            "bc_rows_trained": last["env_steps_trained"],
            "bc_last_evaluation": last["episode_return_mean"],
            "bc_return_100_episodes": final, "curve": curve}  # fmt: skip


def record_pendulum(directory: Path, steps: int, seed: int) -> dict:
    """Half the steps by a SAC policy scoring at least -200, half uniformly random."""
    import hrl_tasks
    from hrl_tasks.rollout import RolloutWorker

    algo, result = hrl_tasks.train("sac", "Pendulum-v1", stop={"episode_return_mean": -200},
                                   seed=seed)  # fmt: skip
    policy = algo.policy
    algo.stop()
    returns = {}
    for kind, uniform in (("good", False), ("random", True)):
        policy.set_uniform_actions(uniform)
        worker = RolloutWorker("Pendulum-v1", policy, num_envs=4, rollout_fragment_length=200,
                               seed=seed + 1, record_experience=str(directory / kind),
                               single_thread=False)  # fmt: skip
        sampled, episode_returns = 0, []
        while sampled < steps // 2:
            batch, metrics = worker.sample()
            sampled += len(batch)
            episode_returns += metrics["episode_returns"]
        worker.close()
        returns[kind] = float(np.mean(episode_returns))
    return {"sac_return": result["episode_return_mean"], "recorded_return": returns}


D3RLPY_SCRIPT = """
import json, sys
import d3rlpy, gymnasium as gym, numpy as np
rows = np.load(sys.argv[1])
dataset = d3rlpy.dataset.MDPDataset(rows["obs"], rows["actions"], rows["rewards"],
                                    rows["terminateds"], timeouts=rows["timeouts"])
env = gym.make("Pendulum-v1")
# Its policies act in [-1, 1]; Pendulum's torques span [-2, 2] (ours scale inside)
scaler = d3rlpy.preprocessing.MinMaxActionScaler(minimum=env.action_space.low,
                                                 maximum=env.action_space.high)
config = getattr(d3rlpy.algos, sys.argv[3] + "Config")
algo = config(action_scaler=scaler).create(device="cpu:0")
algo.fit(dataset, n_steps=int(sys.argv[2]), n_steps_per_epoch=int(sys.argv[2]),
         show_progress=False, save_interval=10**9)
returns = []
for episode in range(10):
    obs, _ = env.reset(seed=10_000 + episode)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(algo.predict(obs[None])[0])
        total, done = total + reward, terminated or truncated
    returns.append(total)
print(json.dumps({"d3rlpy_version": d3rlpy.__version__, "return": float(np.mean(returns))}))
"""


def d3rlpy_run(venv: Path, directory: Path, updates: int, algorithm: str) -> dict:
    """d3rlpy's ``algorithm`` (``CQL``, ``IQL``) with its defaults on the recorded rows, in
    its own virtual environment."""
    from hrl_tasks.data.experience import experience_files, read_file
    from hrl_tasks.policies.torch_utils import start_environ

    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0",
                        "d3rlpy>=2.8,<2.9", "gymnasium>=1.1"], check=True)  # fmt: skip
    parts = [read_file(p) for p in experience_files(f"{directory}/*/*.parquet")]
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    arrays = directory / "rows.npz"
    np.savez(arrays, obs=rows["obs"], actions=rows["actions"], rewards=rows["rewards"],
             terminateds=rows["terminateds"], timeouts=rows["truncateds"])  # fmt: skip
    start = time.perf_counter()  # its environment without the nanny's OMP_NUM_THREADS=1
    done = subprocess.run([str(python), "-c", D3RLPY_SCRIPT, str(arrays), str(updates), algorithm],
                          capture_output=True, text=True, check=True, cwd=directory,
                          env=start_environ())  # fmt: skip
    return {**json.loads(done.stdout.strip().splitlines()[-1]),
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


LEARNERS = ("bc", "marwil", "cql", "iql", "d3rlpy_cql", "d3rlpy_iql")
"""``--pendulum``'s learners: ours by their registry names, d3rlpy's as ``d3rlpy_<name>``."""


def pendulum_run(args) -> dict:
    import hrl_tasks

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        recording = record_pendulum(directory, 100_000, args.seed)
        print(json.dumps(recording), file=sys.stderr, flush=True)
        scores = {}
        for name in args.learners:
            start = time.perf_counter()
            if name.startswith("d3rlpy_"):
                scores[name] = d3rlpy_run(args.venv, directory, args.updates,
                                          name.removeprefix("d3rlpy_").upper())  # fmt: skip
                print(json.dumps({name: scores[name]}), file=sys.stderr, flush=True)
                continue
            per_iteration = 1000
            algo, _ = hrl_tasks.train(name, "Pendulum-v1",
                                      experience_input=f"{directory}/*/*.parquet",
                                      stop={"iteration": max(1, args.updates // per_iteration)},
                                      updates_per_iteration=per_iteration, seed=args.seed,
                                      evaluation_interval=0)  # fmt: skip
            result = algo.evaluate(episodes=10)
            algo.stop()
            scores[name] = {"return": result["evaluation_return_mean"],
                            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
            print(json.dumps({name: scores[name]}), file=sys.stderr, flush=True)
    targets = {}
    for name in ("cql", "iql"):  # each >= BC + 100 and >= d3rlpy's less 10% of its magnitude
        if name in scores and "bc" in scores:
            targets[f"{name}_minus_bc"] = round(scores[name]["return"] - scores["bc"]["return"], 1)
        if name in scores and f"d3rlpy_{name}" in scores:
            reference = scores[f"d3rlpy_{name}"]["return"]
            targets[f"{name}_vs_d3rlpy_within_10_percent"] = scores[name][
                "return"
            ] >= reference - 0.1 * abs(reference)
    if "marwil" in scores and "bc" in scores:
        targets["marwil_minus_bc"] = round(scores["marwil"]["return"] - scores["bc"]["return"], 1)
    return {"bench": "offline_pendulum", "date": time.strftime("%Y-%m-%d"), "commit": args.commit,
            "updates": args.updates, **recording, "scores": scores, **targets}  # fmt: skip


def write_scale_data(directory: Path, files: int, rows: int, seed: int) -> None:
    from hrl_tasks.data.experience import PartWriter

    if directory.exists() and len(list(directory.glob("*.parquet"))) >= files:
        return
    rng = np.random.default_rng(seed)
    writer = PartWriter(str(directory), "synthetic", {"env": "CartPole-v1"}, part_rows=rows)
    for k in range(files):
        ends = np.zeros(rows, bool)
        ends[np.arange(99, rows, 100)] = True  # episodes of 100 steps
        t = np.arange(rows) % 100
        writer.add({
            "obs": rng.normal(size=(rows, 4)).astype(np.float32),
            "actions": rng.integers(2, size=rows), "rewards": np.ones(rows, np.float32),
            "terminateds": ends, "truncateds": np.zeros(rows, bool),
            "eps_id": k * rows // 100 + np.arange(rows) // 100, "t": t,
            "returns_to_go": (100 - t).astype(np.float32),
        })  # fmt: skip


def resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def slope_per_10_min(samples: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The least-squares slope of ``(seconds, MB)`` samples in MB per 10 minutes, and
    its standard error. Pure."""
    if len(samples) < 3:
        return None
    t, mb = (np.asarray(v) for v in zip(*samples, strict=True))
    slope, intercept = np.polyfit(t, mb, 1)
    residual = mb - (slope * t + intercept)
    error = np.sqrt(residual.var(ddof=2) / ((t - t.mean()) ** 2).sum())
    return float(slope * 600), float(error * 600)


def read_capacity(algo, files: list[str], in_flight: int = 4) -> float:
    """Rows per second the run's workers read and deliver to the driver with no
    learner to wait for: BC's own reading task over ``files``, ``in_flight`` at once."""
    from hrl_tasks.flow.offline_ops import read_for_training

    def submit(path):
        return algo.engine.submit(read_for_training, path, algo.columns, algo.postprocess(),
                                  name="read-experience")  # fmt: skip

    start, rows, queue = time.perf_counter(), 0, [submit(f) for f in files[:in_flight]]
    for path in files[in_flight:] + [None] * in_flight:
        rows += len(queue.pop(0).result()["rewards"])
        if path is not None:
            queue.append(submit(path))
    return rows / (time.perf_counter() - start)


def scale_run(args) -> dict:
    import hrl_tasks

    write_scale_data(args.data, 100, 100_000, args.seed)
    samples, stop, read_wait = [], threading.Event(), []
    start = time.perf_counter()

    def watch():
        while not stop.wait(10):
            samples.append((time.perf_counter() - start, resident_mb()))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    algo, last = hrl_tasks.train("bc", "CartPole-v1", experience_input=str(args.data),
                                 stop={"time_total_s": args.minutes * 60}, seed=args.seed,
                                 evaluation_interval=0, num_workers=2,
                                 callback=lambda r: read_wait.append(r.get("time_s", {}).get("read", 0)))  # fmt: skip
    wall = time.perf_counter() - start
    stop.set()
    try:
        capacity = read_capacity(algo, sorted(str(p) for p in args.data.glob("*.parquet")))
    finally:
        algo.stop()
    half = slope_per_10_min([(t, m) for t, m in samples if t >= wall / 2])
    read = last.get("experience_rows_read")
    trained = last["env_steps_trained"] / wall
    return {"bench": "offline_scale", "date": time.strftime("%Y-%m-%d"), "commit": args.commit,
            "machine": f"{platform.machine()}, 2 cores", "rows_on_disk": 10_000_000,
            "minutes": round(wall / 60, 2), "rows_trained_per_s": round(trained),
            "rows_read_per_s": None if read is None else round(read / wall),
            "learner_waiting_on_reads_share": round(sum(read_wait) / wall, 4),
            "read_capacity_rows_per_s": round(capacity),
            "read_capacity_over_trained": round(capacity / trained, 2),
            "driver_rss_mb": [round(m, 1) for _, m in samples],
            "driver_rss_slope_mb_per_10_min": None if half is None else round(half[0], 2),
            "slope_standard_error": None if half is None else round(half[1], 2)}  # fmt: skip


def controller_probs(obs: np.ndarray, random_share: float) -> np.ndarray:
    """``[N, 2]`` action probabilities of the pole controller with ``random_share``
    uniformly random actions. Pure."""
    obs = np.asarray(obs)
    push_right = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.float64)
    chosen = np.stack([1.0 - push_right, push_right], axis=-1)
    return (1.0 - random_share) * chosen + random_share / 2


def controller_episodes(episodes: int, random_share: float, seed: int) -> list[dict]:
    """Episodes of the controller on CartPole-v1 (each as columns, with ``logp``)."""
    import gymnasium as gym

    env, rng, out = gym.make("CartPole-v1"), np.random.default_rng(seed), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed * 100_000 + episode)
        steps, done = [], False
        while not done:
            probs = controller_probs(obs[None], random_share)[0]
            action = int(rng.random() < probs[1])
            nxt, reward, terminated, truncated, _ = env.step(action)
            steps.append((obs, action, reward, terminated, truncated, nxt, np.log(probs[action])))
            obs, done = nxt, terminated or truncated
        out.append({
            "obs": np.array([s[0] for s in steps], np.float32),
            "actions": np.array([s[1] for s in steps], np.int64),
            "rewards": np.array([s[2] for s in steps], np.float32),
            "terminateds": np.array([s[3] for s in steps]),
            "truncateds": np.array([s[4] for s in steps]),
            "next_obs": np.array([s[5] for s in steps], np.float32),
            "logp": np.array([s[6] for s in steps], np.float32),
            "eps_id": np.full(len(steps), episode, np.int64),
            "t": np.arange(len(steps), dtype=np.int64),
        })  # fmt: skip
    return out


def discounted(episodes: list[dict], gamma: float) -> float:
    return float(np.mean([np.sum(gamma ** np.arange(len(e["rewards"])) * e["rewards"])
                          for e in episodes]))  # fmt: skip


def ope_run(args) -> dict:
    from hrl_tasks.algorithms.offline import ESTIMATORS
    from hrl_tasks.policies.fqe import FittedQEvaluation
    from hrl_tasks.policies.off_policy_estimation import split_episodes

    gamma, start = 0.99, time.perf_counter()
    truth = discounted(controller_episodes(1000, args.target_random, args.seed + 1), gamma)
    recorded = controller_episodes(args.episodes, args.behaviour_random, args.seed)
    rows = {k: np.concatenate([e[k] for e in recorded]) for k in recorded[0]}
    rows["target_logp"] = np.log(controller_probs(rows["obs"], args.target_random)
                                 [np.arange(len(rows["actions"])), rows["actions"]])  # fmt: skip
    fqe = FittedQEvaluation(4, 2, gamma, seed=args.seed)
    fqe.fit(rows, controller_probs(rows["next_obs"], args.target_random), steps=args.fqe_steps)
    q_all = fqe.q_values(rows["obs"])
    rows["q"] = q_all[np.arange(len(q_all)), rows["actions"]]
    rows["v"] = (controller_probs(rows["obs"], args.target_random) * q_all).sum(-1)
    episodes = split_episodes(rows)
    estimates = {name: ESTIMATORS[name](episodes, gamma) for name in ("is", "wis", "dr")}
    errors = {name: round(abs(v - truth) / abs(truth), 4) for name, v in estimates.items()}
    return {"bench": "offline_ope", "date": time.strftime("%Y-%m-%d"), "commit": args.commit,
            "gamma": gamma, "behaviour_random": args.behaviour_random,
            "target_random": args.target_random, "recorded_episodes": args.episodes,
            "recorded_rows": len(rows["rewards"]), "target_measured_return": round(truth, 3),
            "recorded_return": round(discounted(recorded, gamma), 3),
            "estimates": {k: round(v, 3) for k, v in estimates.items()},
            "relative_errors": errors, "within_10_percent": all(e <= 0.1 for e in errors.values()),
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bc", action="store_true")
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--pendulum", action="store_true")
    parser.add_argument("--updates", type=int, default=20_000, help="--pendulum: per learner")
    parser.add_argument("--learners", nargs="+", choices=LEARNERS, default=list(LEARNERS),
                        help="--pendulum: which to train (d3rlpy_*: d3rlpy's, in --venv)")  # fmt: skip
    parser.add_argument("--venv", type=Path, default=Path("/tmp/d3rlpy-venv"))
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--data", type=Path, default=Path("/tmp/offline-10m"))
    parser.add_argument("--ope", action="store_true")
    parser.add_argument("--episodes", type=int, default=1000, help="--ope: recorded episodes")
    parser.add_argument("--behaviour-random", type=float, default=0.5)
    parser.add_argument("--target-random", type=float, default=0.3)
    parser.add_argument("--fqe-steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.commit = commit()  # the code the run starts on
    if not (args.bc or args.scale or args.pendulum or args.ope):
        parser.error("say --bc, --pendulum, --scale or --ope")
    if args.ope:
        print(json.dumps(ope_run(args)), flush=True)
    if args.bc:
        print(json.dumps(bc_run(args)), flush=True)
    if args.pendulum:
        print(json.dumps(pendulum_run(args)), flush=True)
    if args.scale:
        print(json.dumps(scale_run(args)), flush=True)


if __name__ == "__main__":
    main()
