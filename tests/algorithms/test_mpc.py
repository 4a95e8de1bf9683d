"""MPC (PETS): the CEM planner swings up the true pendulum, the ensemble learns a one-step
model, plans are reproducible and do not depend on how they are split into tasks, and a
loaded checkpoint plans with no cluster."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import hrl_tasks
from hrl_tasks.algorithms import MPC, ConfigError, MPCConfig, load
from hrl_tasks.algorithms.mpc import (
    CEMConfig,
    CEMPlanner,
    DynamicsEnsemble,
    EnsembleRollouts,
    EnsembleSpec,
)
from hrl_tasks.algorithms.mpc.planner import candidate_returns
from hrl_tasks.planning.control import PendulumModel

pytestmark = pytest.mark.timeout(120)

SMALL = {  # a plan in milliseconds: for tests of plumbing, not of learning
    "seed": 0,
    "hidden": (32, 32),
    "ensemble_size": 3,
    "random_steps": 60,
    "steps_per_iteration": 6,
    "updates_per_iteration": 20,
    "train_batch_size": 32,
    "horizon": 5,
    "population": 30,
    "elites": 5,
    "cem_iterations": 2,
    "particles": 2,
}


class TruePendulum:
    """The pendulum's own physics as a planning model (a `RolloutModel`)."""

    def __init__(self):
        self.physics = PendulumModel()

    def returns(self, params, observation, candidates, first, population, seed):
        state = self.physics.state_from_observation(np.asarray(observation, np.float64))
        states = np.repeat(state[None], len(candidates), axis=0)
        total = np.zeros(len(candidates))
        for t in range(candidates.shape[1]):
            states, rewards, _ = self.physics.step_batch(states, candidates[:, t])
            total += rewards
        return total


def pendulum_transitions(n: int, seed: int) -> dict[str, np.ndarray]:
    """Transitions from states and torques drawn uniformly over the pendulum's range."""
    rng, physics = np.random.default_rng(seed), PendulumModel()
    states = rng.uniform([-np.pi, -8.0], [np.pi, 8.0], size=(n, 2))
    actions = rng.uniform(-2.0, 2.0, size=(n, 1)).astype(np.float32)
    next_states, rewards, terminated = physics.step_batch(states, actions)
    return {
        "obs": physics.observation(states),
        "actions": actions,
        "rewards": rewards.astype(np.float32),
        "next_obs": physics.observation(next_states),
        "terminateds": terminated,
    }


def small_ensemble(seed: int = 0, **spec) -> DynamicsEnsemble:
    torch.set_num_threads(1)  # as the algorithms do (learner_threads): small nets learn faster
    torch.manual_seed(seed)
    env = gym.make("Pendulum-v1")
    sizes = {"ensemble_size": 3, "hidden": (64, 64), **spec}
    model = DynamicsEnsemble(
        env.observation_space, env.action_space, EnsembleSpec(3, 1, **sizes), lr=3e-3
    )
    env.close()
    return model


# --- the planner ---------------------------------------------------------------------


def test_the_planner_swings_up_the_true_pendulum_and_keeps_it_up():
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    config = CEMConfig(horizon=15, population=100, elites=10, iterations=3)
    planner = CEMPlanner(TruePendulum(), env.action_space, config)
    rng, total, upright = np.random.default_rng(0), 0.0, []
    for _ in range(100):
        action = planner.plan(obs, None, rng)
        assert action.shape == (1,) and action.dtype == np.float32 and abs(action[0]) <= 2.0
        obs, reward, *_ = env.step(action)
        total += reward
        upright.append(obs[0])
    assert min(upright[-30:]) > 0.98, upright[-30:]  # cos(theta): up, and staying there
    assert total > -300, total  # a random policy gets about -600 in 100 steps


def test_a_discrete_planner_picks_the_action_of_the_best_sequence():
    class LeftIsGood:
        def returns(self, params, observation, candidates, first, population, seed):
            return (candidates == 0).sum(axis=1).astype(float)

    planner = CEMPlanner(LeftIsGood(), gym.spaces.Discrete(3, start=1), CEMConfig(horizon=4))
    assert planner.plan(np.zeros(2), None, np.random.default_rng(0)) == 1  # index 0: action 1


# --- the ensemble ----------------------------------------------------------------------


def test_the_ensemble_learns_a_one_step_model_of_the_pendulum():
    model = small_ensemble()
    train, held_out = pendulum_transitions(2000, seed=0), pendulum_transitions(500, seed=1)
    model.fit(train, updates=0, batch_size=128, rng=np.random.default_rng(0))  # normalisers
    before = model.prediction_error(held_out)
    rng = np.random.default_rng(0)
    first = model.fit(train, updates=50, batch_size=128, rng=rng)
    for _ in range(4):
        last = model.fit(train, updates=80, batch_size=128, rng=rng)
    after = model.prediction_error(held_out)
    assert last["nll"] < first["nll"] - 5 and last["mse"] < first["mse"] / 5, (first, last)
    assert after < before / 40 and after < 0.06, (before, after)  # rewards go to -16
    assert last["termination_loss"] < 0.05  # the pendulum never terminates


def test_ensemble_rollouts_do_not_depend_on_the_split_of_the_population():
    model = small_ensemble()
    model.fit(pendulum_transitions(300, seed=0), 20, 64, np.random.default_rng(0))
    params = model.params()
    candidates = np.random.default_rng(1).uniform(-2, 2, size=(40, 6, 1)).astype(np.float32)
    obs = np.array([0.0, 1.0, 0.5], np.float32)
    rollouts = EnsembleRollouts(particles=3)
    whole = candidate_returns(rollouts, params, obs, candidates, 0, 40, seed=7)
    parts = [candidate_returns(rollouts, params, obs, candidates[a:b], a, 40, seed=7)
             for a, b in ((0, 13), (13, 14), (14, 40))]  # fmt: skip
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-5)
    other_seed = candidate_returns(rollouts, params, obs, candidates, 0, 40, seed=8)
    assert not np.allclose(other_seed, whole)  # the particles are sampled


# --- the algorithm ----------------------------------------------------------------------


def test_the_same_seed_gives_the_same_run_on_the_sync_engine():
    def run(**config):
        with hrl_tasks.SyncEngine() as engine:
            algo = MPC(dict(SMALL, **config), engine=engine)
            try:
                result = algo.train()
                actions = [algo.compute_single_action(np.array([1.0, 0.0, 0.0])) for _ in range(2)]
                return result, algo.data.all()["actions"], actions
            finally:
                algo.stop()

    result, data, actions = run()
    again, data_again, actions_again = run()
    assert result["env_steps_sampled"] == 66 and result["iteration"] == 1
    assert result["info/nll"] == again["info/nll"]
    np.testing.assert_array_equal(data, data_again)
    np.testing.assert_array_equal(actions, actions_again)
    _, data_other, _ = run(seed=1)
    assert not np.array_equal(data, data_other)


def test_planner_tasks_give_the_in_process_plans():
    def planned_actions(planner_tasks: int) -> np.ndarray:
        with hrl_tasks.SyncEngine() as engine:
            algo = MPC(dict(SMALL, planner_tasks=planner_tasks), engine=engine)
            try:
                algo.train()
                assert engine.stats()["submitted"] == (12 * planner_tasks or 0)
                return algo.data.all()["actions"][SMALL["random_steps"] :]
            finally:
                algo.stop()

    in_process = planned_actions(0)
    np.testing.assert_allclose(planned_actions(3), in_process, rtol=1e-5)
    np.testing.assert_allclose(planned_actions(30), in_process, rtol=1e-5)


def test_a_loaded_checkpoint_plans_with_no_cluster(tmp_path):
    with hrl_tasks.SyncEngine() as engine:
        algo = MPC(SMALL, engine=engine)
        try:
            algo.train()
            algo.save(tmp_path / "mpc.hrl")
            observations = np.random.default_rng(0).uniform(-1, 1, size=(3, 3)).astype(np.float32)
            actions = [algo.compute_single_action(obs) for obs in observations]
        finally:
            algo.stop()
    loaded = hrl_tasks.load(tmp_path)
    assert isinstance(loaded, MPC) and loaded.acting_only and loaded.engine is None
    assert loaded.iteration == 1
    again = [loaded.compute_single_action(obs) for obs in observations]
    np.testing.assert_array_equal(again, actions)
    space = loaded.policy.action_space
    assert all(a.shape == (1,) and space.contains(a) for a in again)
    with pytest.raises(hrl_tasks.EngineError, match="loaded to act"):
        loaded.train()
    loaded.stop()


def test_a_resumed_run_keeps_its_data_model_and_counters(tmp_path):
    with hrl_tasks.SyncEngine() as engine:
        algo = MPC(SMALL, engine=engine)
        try:
            algo.train()
            algo.save(tmp_path / "mpc.hrl")
            weights = algo.model.get_weights()
        finally:
            algo.stop()
        resumed = load(tmp_path, engine=engine)
        try:
            assert len(resumed.data) == 66 and resumed.ctx.counters["random_steps"] == 60
            for key, value in weights.items():
                np.testing.assert_array_equal(resumed.model.get_weights()[key], value)
            result = resumed.train()  # no random steps again: the data came back
            assert result["iteration"] == 2 and result["env_steps_sampled"] == 72
            assert result["dataset_size"] == 72
        finally:
            resumed.stop()


def test_discrete_actions_on_cartpole():
    with hrl_tasks.SyncEngine() as engine:
        algo = MPC(dict(SMALL, env="CartPole-v1"), engine=engine)
        try:
            result = algo.train()
            action = algo.compute_single_action(np.zeros(4, np.float32))
        finally:
            algo.stop()
    assert isinstance(action, int) and action in (0, 1)
    assert result["env_steps_sampled"] == 66 and result["episodes_total"] >= 1


def test_config_keys_that_do_not_fit_together_are_named():
    with pytest.raises(ConfigError, match=r"MPCConfig.elites must be <= population \(10\)"):
        MPCConfig.from_dict(population=10, elites=11)
    with pytest.raises(ConfigError, match=r"MPCConfig.planner_tasks must be <= population"):
        MPCConfig.from_dict(population=10, elites=2, planner_tasks=11)
    assert MPCConfig().env == "Pendulum-v1"


@pytest.mark.cluster
def test_one_iteration_on_a_cluster_with_planner_tasks():
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = MPC(dict(SMALL, planner_tasks=2), engine=engine)
        try:
            result = algo.train()
            stats = engine.stats()
        finally:
            algo.stop()
    assert result["env_steps_sampled"] == 66 and result["plan_time_s"] > 0
    assert stats["submitted"] == 6 * 2 * 2  # steps x CEM iterations x tasks
    assert stats["failed"] == 0
