"""ES: the update's math, evaluation tasks, in-process and on a real cluster."""

import gymnasium as gym
import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms.algorithm import read_checkpoint
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.es import ES
from hrl_tasks.algorithms.es.evaluate import (
    Evaluator,
    NoiseTableConfig,
    NoiseTablePolicy,
    evaluate_pair,
    evaluate_theta,
    make_noise_table,
)
from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import NOISE_SEEDS, RETURNS, centered_ranks
from hrl_tasks.rollout import register_env
from hrl_tasks.scheduler.faults import clear_faults, inject_faults
from tests.policies.synthetic import cartpole_spaces

TINY = {"num_perturbations": 6, "noise_table_size": 50_000, "hidden": (16,), "seed": 3}


def table_policy(**overrides):
    config = NoiseTableConfig(**{"seed": 0, "hidden": (4,), "noise_table_size": 1000, **overrides})
    return NoiseTablePolicy(*cartpole_spaces(), config)


def test_update_follows_centered_ranks_of_antithetic_pairs():
    with hrl_tasks.SyncEngine():  # the driver's noise table lives in the current engine
        policy = table_policy(l2_coeff=0.0, lr=0.01)
        table = make_noise_table(123, 1000)
        indices = np.array([7, 300, 41])
        # Pair 0: +eps better; pair 1: -eps better; pair 2: +eps best of all.
        returns = np.array([[20.0, 10.0], [1.0, 30.0], [100.0, 0.0]])
        # Ranks of the six returns (0 for 0.0 ... 5 for 100.0) / 5 - 0.5; weight = rank+ - rank-.
        ranks = np.array([[3, 2], [1, 4], [5, 0]]) / 5 - 0.5
        np.testing.assert_allclose(centered_ranks(returns), ranks, rtol=1e-6)
        weights = ranks[:, 0] - ranks[:, 1]
        np.testing.assert_allclose(weights, [0.2, -0.6, 1.0])
        n = policy.num_params
        direction = sum(w * table[i : i + n] for w, i in zip(weights, indices, strict=True)) / 6
        np.testing.assert_array_equal(policy.noise(300), table[300 : 300 + n])
        batch = SampleBatch({NOISE_SEEDS: indices, RETURNS: returns})
        grads, _ = policy.compute_gradients(batch)
        np.testing.assert_allclose(
            np.concatenate([g.ravel() for g in grads]), -direction, rtol=1e-5, atol=1e-7
        )
        # Adam's first step moves every parameter by ~lr along the sign of the direction.
        theta = policy.get_flat()
        policy.learn_on_batch(batch)
        step = policy.get_flat() - theta
        big = np.abs(direction) > 1e-3
        np.testing.assert_array_equal(np.sign(step[big]), np.sign(direction[big]))
        np.testing.assert_allclose(np.abs(step[big]), 0.01, rtol=1e-3)


def test_evaluation_tasks_are_antithetic_and_pure():
    with hrl_tasks.SyncEngine() as engine:
        policy = table_policy(noise_stdev=0.5)
        evaluator = Evaluator("CartPole-v1", {}, *cartpole_spaces(), policy.config)
        theta = policy.get_flat()
        eps = policy.noise(17)
        pair = engine.submit(evaluate_pair, evaluator, engine.put(theta), 17, 5).result()
        assert pair["returns"] == [
            evaluator.run(theta + 0.5 * eps, 5)[0][0],
            evaluator.run(theta - 0.5 * eps, 5)[0][0],
        ]
        assert pair["env_steps"] == sum(pair["episode_lengths"]) == sum(pair["episode_returns"])
        assert evaluate_pair(evaluator, theta, 17, 5) == pair  # same inputs, same result
        plain = evaluate_theta(evaluator, theta, 5, 3)
        returns, _ = evaluator.run(theta, 5, 3)
        assert plain["episode_returns"] == returns and plain["returns"] == [np.mean(returns)]


def test_episode_cap_and_config_checks():
    with hrl_tasks.SyncEngine():
        policy = table_policy()
        capped = Evaluator(
            "CartPole-v1", {}, *cartpole_spaces(), policy.config, episodes=3, max_episode_steps=4
        )
        returns, lengths = capped.run(np.zeros(policy.num_params, np.float32), 0)
        assert len(returns) == 3 and max(lengths) <= 4
        with pytest.raises(ValueError, match="noise_table_size"):
            table_policy(noise_table_size=10)
    with pytest.raises(ConfigError, match="num_perturbations"):
        ES({"num_perturbations": 0})


def test_sync_engine_learns_deterministically():
    """In-process, with a fixed seed, ES is deterministic: this run reaches 150 in 8 iterations."""
    with hrl_tasks.SyncEngine() as engine:
        algo = ES({**TINY, "num_perturbations": 16, "hidden": (32,), "seed": 0}, engine=engine)
        try:
            first = algo.train()
            for key in ("episode_return_mean", "episode_len_mean", "env_steps_sampled", "info"):
                assert key in first
            assert first["info"]["perturbations_per_s"] > 0
            results = [first] + [algo.train() for _ in range(7)]
        finally:
            algo.stop()
    steps = [r["env_steps_sampled"] for r in results]
    assert steps == sorted(steps) and steps[0] > 0
    assert max(r["info"]["theta_return_mean"] for r in results) >= 150, results[-1]


@pytest.mark.cluster
def test_smoke_on_cluster(engine):
    algo = ES(TINY, engine=engine)
    try:
        first, second = algo.train(), algo.train()
        assert second["iteration"] == 2
        assert second["env_steps_sampled"] > first["env_steps_sampled"] > 0
        assert second["env_steps_trained"] == second["env_steps_sampled"]
        assert second["episodes_total"] == 2 * 2 * TINY["num_perturbations"]
        for key in ("episode_return_mean", "episode_len_mean", "time_s", "engine"):
            assert key in second
        assert {"perturbations_per_s", "theta_return_mean", "return_mean"} <= set(second["info"])
        assert len(algo.workers.remote_workers) == 0  # no rollout workers: tasks only
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
    finally:
        algo.stop()


class FlakyCartPole(gym.Wrapper):
    """CartPole whose steps raise in the first attempt of every task, when asked to."""

    def __init__(self, fail_first_attempt=False):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_first_attempt = fail_first_attempt

    def step(self, action):
        if self.fail_first_attempt and hrl_tasks.task_context().attempt == 0:
            raise RuntimeError("injected env failure")
        return self.env.step(action)


@pytest.mark.cluster
def test_failed_and_straggling_tasks_change_nothing(engine):
    """Evaluations are pure: retried tasks and backup copies give the same update."""
    register_env("FlakyCartPole-v0", FlakyCartPole)
    clean = ES({**TINY, "env": "FlakyCartPole-v0"}, engine=engine)
    try:
        clean.train(), clean.train()
        expected = clean.policy.get_flat()
    finally:
        clean.stop()
    before = engine.stats()
    inject_faults(engine, transient=(0.2, 5.0), names={"es-perturbation"}, seed=1)
    config = {**TINY, "env": "FlakyCartPole-v0", "env_config": {"fail_first_attempt": True}}
    faulty = ES(config, engine=engine)
    try:
        faulty.train(), faulty.train()
        np.testing.assert_array_equal(faulty.policy.get_flat(), expected)
        # Each task's first attempt failed: a retry or a backup copy (attempt >= 1) won.
        rescued = sum(engine.stats()[k] - before[k] for k in ("retried", "backup_won"))
        assert rescued >= 2 * (TINY["num_perturbations"] + 1)
    finally:
        clear_faults(engine)
        faulty.stop()


@pytest.mark.cluster
def test_save_and_restore_continue_exactly(engine, tmp_path):
    first = ES(TINY, engine=engine)
    try:
        first.train(), first.train()
        path = first.save(tmp_path / "es.hrl")
        first.train()
        expected = first.policy.get_flat()
    finally:
        first.stop()
    second = ES(TINY, engine=engine)
    try:
        second.restore(path)
        saved = read_checkpoint(path)["policy"]
        restored = second.get_state()["policy"]
        for name, value in saved["weights"].items():
            np.testing.assert_array_equal(restored["weights"][name], value)
        assert restored["num_grad_updates"] == saved["num_grad_updates"] == 2
        assert second.train()["iteration"] == 3
        np.testing.assert_array_equal(second.policy.get_flat(), expected)
    finally:
        second.stop()
