"""Algorithms keep training when a rollout worker's process is killed (SIGKILL)."""

import os
import signal
import threading
import time

import pytest

import hrl_tasks
from hrl_tasks.algorithms import A2C, A3C, APPO, DQN, ES, IMPALA, PPO, ApeX
from hrl_tasks.algorithms.composition import Composition
from hrl_tasks.policies.policy_map import PolicySpec

pytestmark = pytest.mark.cluster


def first_ppo_second_dqn(agent_id, episode):
    return "ppo" if agent_id == "player_1" else "dqn"


TINY = {"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 3}
CASES = [
    (A2C, {"train_batch_size": 64}),
    (A3C, {"min_steps_per_report": 64}),
    (PPO, {"train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}),
    (
        DQN,
        {
            "learning_starts": 64,
            "train_steps_per_round": 2,
            "min_steps_per_report": 64,
            "hidden": (32, 32),
        },
    ),  # fmt: skip
    (IMPALA, {"train_batch_size": 64, "min_steps_per_report": 64}),
    (APPO, {"train_batch_size": 64, "min_steps_per_report": 64}),
    (
        ApeX,  # the killed process holds a rollout worker and a replay shard (spread)
        {
            "learning_starts": 64,
            "min_steps_per_report": 64,
            "hidden": (32, 32),
            "num_replay_shards": 2,
            "train_batch_size": 32,
        },
    ),  # fmt: skip
    (
        Composition,  # PPO and DQN learning together, one player each, from one rollout flow
        {
            "env": "tictactoe_v3",
            "min_steps_per_report": 64,
            "policies": {
                "ppo": PolicySpec("ppo", {"train_batch_size": 64, "minibatch_size": 32}),
                "dqn": PolicySpec(
                    "dqn", {"learning_starts": 32, "train_steps_per_round": 2, "hidden": (32, 32)}
                ),
            },
            "policy_mapping_fn": first_ppo_second_dqn,
        },
    ),  # fmt: skip
]


def pid_address(engine, pid):
    """The address of the worker whose process is ``pid``, if it still runs."""
    return next((a for a, p in engine.client.run(os.getpid).items() if p == pid), None)


@pytest.fixture
def fresh():
    """Its own cluster: the test kills a worker process."""
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        yield engine


# One plan of each way of sampling: A2C's and DQN's rounds are PPO's (bulk-synchronous),
# APPO's asynchronous sampling is IMPALA's; the three kills below cover DQN too.
ONE_OF_EACH = [c for c in CASES if c[0] not in (A2C, APPO, DQN)]


@pytest.mark.parametrize("algo_cls, extra", ONE_OF_EACH, ids=[c.__name__ for c, _ in ONE_OF_EACH])
def test_training_goes_on_after_a_rollout_worker_is_killed(fresh, algo_cls, extra):
    algo = algo_cls({**TINY, **extra}, engine=fresh)
    try:
        before = algo.train()
        victim = algo.workers.remote_workers[0]
        pid = fresh.client.run(os.getpid, workers=[victim.address])[victim.address]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60  # batches already sampled may carry a few iterations
        while victim.restarts == 0:
            assert time.monotonic() < deadline, "the lost rollout worker was not re-created"
            algo.train()
        after = [algo.train() for _ in range(2)]  # with the re-created worker
        assert after[-1]["env_steps_sampled"] > before["env_steps_sampled"]
        assert victim.alive and victim.address != pid_address(fresh, pid)
        assert fresh.stats()["workers_lost"] >= 1
        for key in (k for k in before if k.startswith("policy_return_mean/")):
            assert key in after[-1]  # a multi-agent run goes on reporting every policy
    finally:
        algo.stop()


@pytest.mark.timeout(120)
def test_a_checkpoint_taken_as_a_rollout_worker_dies_waits_for_the_one_re_created(fresh):
    # As `hrl-tasks train` checkpoints while a worker rank is killed: the rng state of
    # the lost worker is asked again of its replacement.
    algo = PPO({"num_workers": 2, "train_batch_size": 64, "minibatch_size": 32,
                "num_sgd_iter": 2, "seed": 3}, engine=fresh)  # fmt: skip
    try:
        algo.train()
        victim = algo.workers.remote_workers[0]
        pid = fresh.client.run(os.getpid, workers=[victim.address])[victim.address]
        os.kill(pid, signal.SIGKILL)
        states = [algo.get_state() for _ in range(3)]  # the first asks the dying worker
        assert victim.restarts >= 1 and victim.alive
        assert all(len(state["workers"]) == 3 for state in states)
        assert algo.train()["iteration"] == 2
    finally:
        algo.stop()


def test_es_goes_on_after_a_worker_running_its_episodes_is_killed(fresh):
    """ES has no rollout workers: its episodes are tasks, retried after a lost worker."""
    algo = ES({"num_perturbations": 8, "seed": 3}, engine=fresh)
    try:
        before = algo.train()
        pids = fresh.client.run(os.getpid)
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        after = [algo.train() for _ in range(3)]
        assert after[-1]["iteration"] == before["iteration"] + 3
        assert after[-1]["env_steps_sampled"] > before["env_steps_sampled"]
        assert fresh.stats()["workers_lost"] >= 1
    finally:
        algo.stop()


def kill_in_quick_succession(engine, kills: int, gap_s: float) -> threading.Thread:
    """A thread that kills a worker process ``kills`` times, ``gap_s`` apart (each time
    the first of those alive, the re-spawned ones included)."""

    def run():
        for i in range(kills):
            if i:
                time.sleep(gap_s)
            pids = {}
            while not pids:  # all of them are being re-spawned
                pids = engine.run_on_workers(os.getpid, on_error="ignore")
            os.kill(pids[sorted(pids)[0]], signal.SIGKILL)

    thread = threading.Thread(target=run, daemon=True, name="kills")
    thread.start()
    return thread


ALL_CASES = [*(c for c in CASES if c[0] not in (A2C, APPO)), (ES, {"num_perturbations": 8})]


@pytest.mark.parametrize("algo_cls, extra", ALL_CASES, ids=[c.__name__ for c, _ in ALL_CASES])
def test_training_goes_on_after_three_kills_half_a_second_apart(fresh, algo_cls, extra):
    """Kills in quick succession, the next while the last one's work is being re-launched:
    every iteration ends on its own (the test's timeout says a hang), and sampling goes on."""
    algo = algo_cls({**TINY, **extra}, engine=fresh)
    try:
        before = algo.train()
        kills = kill_in_quick_succession(fresh, kills=3, gap_s=0.5)
        while kills.is_alive():
            algo.train()
        after = [algo.train() for _ in range(3)]
        assert after[-1]["env_steps_sampled"] > before["env_steps_sampled"]
        assert fresh.stats()["workers_lost"] >= 1
        fresh.validate()  # and nothing the engine holds is left in limbo
    finally:
        algo.stop()


FROZEN_CASES = [(ES, {"num_perturbations": 8}), next(c for c in CASES if c[0] is ApeX)]


@pytest.mark.parametrize("algo_cls, extra", FROZEN_CASES, ids=[c.__name__ for c, _ in FROZEN_CASES])
def test_training_goes_on_while_a_worker_is_frozen(fresh, algo_cls, extra):
    """A worker frozen (SIGSTOP) for 30 s accepts connections and answers none: the
    iterations go on with the other worker instead of waiting for it to run again
    (ES's round put theta on every worker; Ape-X's samplers each fed one shard). Not
    the process of Ape-X's learner: a frozen learner holds the training, as a frozen
    driver would (README, "when things go wrong")."""
    algo = algo_cls({**TINY, **extra}, engine=fresh)
    try:
        before = algo.train()
        pids = fresh.client.run(os.getpid)
        learner = getattr(algo.workers.learner_group, "handle", None)
        pid = pids[min(set(pids) - {getattr(learner, "address", None)})]
        os.kill(pid, signal.SIGSTOP)
        thaw = threading.Timer(30, os.kill, (pid, signal.SIGCONT))
        thaw.start()
        try:
            start = time.monotonic()
            after = [algo.train() for _ in range(3)]
            took = time.monotonic() - start
        finally:
            thaw.cancel()
            os.kill(pid, signal.SIGCONT)
        assert took < 20, f"3 iterations took {took:.1f} s beside a frozen worker"
        assert after[-1]["env_steps_sampled"] > before["env_steps_sampled"]
    finally:
        algo.stop()
