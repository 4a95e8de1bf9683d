import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import DQNPolicy, DQNPolicyConfig, PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import EnvError, RolloutWorker
from hrl_tasks.rollout.worker import EPS_ID_BITS
from tests.rollout.envs import BadOutputEnv, ChainEnv, RecordActions

GAMMA = 0.9


def ppo(obs_space, act_space):
    return PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0, gamma=GAMMA, lam=1.0))


def numpy_ppo(obs_space, act_space):
    return ppo(obs_space, act_space).inference_copy()


def keeping_next_obs(factory):
    """``factory``'s policies, whose batches keep ``next_obs`` (an actor-critic's drop it:
    it never reads them) so that tests can check what the worker wrote there."""

    def make(obs_space, act_space):
        policy = factory(obs_space, act_space)
        policy.reads_next_obs = True
        return policy

    return make


@pytest.fixture(params=["torch", "numpy"])
def actor(request):
    """The PPO policy, or its numpy inference copy: rollouts behave the same."""
    return {"torch": ppo, "numpy": numpy_ppo}[request.param]


def truncating_chain():
    return TimeLimit(ChainEnv(), max_episode_steps=3)


def terminating_chain():
    return TimeLimit(ChainEnv(terminate_at=3), max_episode_steps=100)


def blocks(batch, num_envs):
    """The batch split into its per-env blocks (rows in time order)."""
    size = len(batch) // num_envs
    return [batch[i * size : (i + 1) * size] for i in range(num_envs)]


def test_cartpole_batch_columns_shapes_and_layout(actor):
    plain, _ = RolloutWorker("CartPole-v1", actor, num_envs=2, seed=0).sample()
    assert "next_obs" not in plain.columns  # an actor-critic never reads it
    worker = RolloutWorker("CartPole-v1", keeping_next_obs(actor), num_envs=2,
                           rollout_fragment_length=40, seed=0)  # fmt: skip
    batch, metrics = worker.sample()
    assert len(batch) == 80 and metrics["env_steps"] == 80
    expected = {
        "obs",
        "actions",
        "rewards",
        "terminateds",
        "truncateds",
        "next_obs",
        "eps_id",
        "t",
        "logp",
        "values",
        "next_values",
        "advantages",
        "value_targets",
    }
    assert set(batch.columns) == expected
    assert batch["obs"].shape == batch["next_obs"].shape == (80, 4)
    assert batch["actions"].shape == (80,) and batch["actions"].dtype == np.int64
    for name in ("rewards", "logp", "values", "next_values", "advantages", "value_targets"):
        assert batch[name].shape == (80,) and batch[name].dtype == np.float32, name
    assert batch["eps_id"].dtype == np.int64
    assert batch["terminateds"].dtype == bool
    for block in blocks(batch, 2):  # each env's rows in time order
        done = block["terminateds"] | block["truncateds"]
        for t in range(len(block) - 1):
            if done[t]:
                assert block["t"][t + 1] == 0
            else:
                assert block["t"][t + 1] == block["t"][t] + 1
                np.testing.assert_array_equal(block["next_obs"][t], block["obs"][t + 1])
    assert metrics["worker_index"] == 0 and metrics["env_errors"] == 0
    assert len(metrics["episode_returns"]) == len(metrics["episode_lengths"])


def test_pendulum_actions_are_clipped_for_the_env_but_kept_in_the_batch(actor):
    worker = RolloutWorker(
        lambda: RecordActions(gym.make("Pendulum-v1")), actor, rollout_fragment_length=200, seed=0
    )
    batch, _ = worker.sample()
    assert batch["obs"].shape == (200, 3)
    assert batch["actions"].shape == (200, 1) and batch["actions"].dtype == np.float32
    received = np.stack(worker.env.envs[0].env.received)
    assert np.abs(received).max() <= 2.0
    assert np.abs(batch["actions"]).max() > 2.0  # some samples fell outside the bounds
    np.testing.assert_allclose(received, np.clip(batch["actions"], -2.0, 2.0))
    assert set(batch.columns) >= {"logp", "values", "next_values", "advantages"}


def test_next_values_bootstrap_the_final_observation_on_truncation(actor):
    worker = RolloutWorker(truncating_chain, keeping_next_obs(actor), rollout_fragment_length=8,
                           seed=0)  # fmt: skip
    batch, metrics = worker.sample()

    def value(t):
        return float(worker.policy.compute_values(np.array([[t]], np.float32))[0])

    np.testing.assert_array_equal(batch["truncateds"], [0, 0, 1, 0, 0, 1, 0, 0])
    assert not batch["terminateds"].any()
    np.testing.assert_array_equal(batch["next_obs"][2], [3.0])  # the pre-reset observation
    np.testing.assert_array_equal(batch["obs"][3], [0.0])
    assert batch["next_values"][2] == pytest.approx(value(3), rel=1e-5)
    assert batch["next_values"][2] != pytest.approx(batch["values"][3])
    assert batch["next_values"][0] == pytest.approx(batch["values"][1])
    assert batch["next_values"][7] == pytest.approx(value(2), rel=1e-5)  # the fragment's bootstrap
    # GAE stops at the truncation and bootstraps from V(final observation).
    assert batch["advantages"][2] == pytest.approx(1.0 + GAMMA * value(3) - value(2), rel=1e-5)
    assert metrics["episode_lengths"] == [3, 3]


def test_next_values_are_zero_on_termination(actor):
    worker = RolloutWorker(terminating_chain, actor, rollout_fragment_length=8, seed=0)
    batch, _ = worker.sample()
    np.testing.assert_array_equal(batch["terminateds"], [0, 0, 1, 0, 0, 1, 0, 0])
    assert not batch["truncateds"].any()
    assert batch["next_values"][2] == 0.0
    assert batch["advantages"][2] == pytest.approx(1.0 - batch["values"][2], rel=1e-5)


def test_eps_ids_change_exactly_at_episode_ends_and_differ_between_workers():
    workers = [
        RolloutWorker(
            truncating_chain, ppo, num_envs=2, rollout_fragment_length=7, seed=0, worker_index=i
        )
        for i in (1, 2)
    ]
    batches = [w.sample()[0] for w in workers]
    for index, batch in zip((1, 2), batches, strict=True):
        assert (batch["eps_id"] >> EPS_ID_BITS == index).all()
        per_env = blocks(batch, 2)
        for block in per_env:
            done = block["terminateds"] | block["truncateds"]
            changes = block["eps_id"][1:] != block["eps_id"][:-1]
            np.testing.assert_array_equal(changes, done[:-1])
        assert not set(per_env[0]["eps_id"]) & set(per_env[1]["eps_id"])
        assert [len(e) for e in batch.split_by_episode()] == [3, 3, 1, 3, 3, 1]
    assert not set(batches[0]["eps_id"]) & set(batches[1]["eps_id"])
    # An episode cut by the fragment's end keeps its id in the next fragment.
    nxt = workers[0].sample()[0]
    assert nxt["eps_id"][0] == batches[0]["eps_id"][6] and nxt["t"][0] == 1


def test_same_seed_gives_the_same_batch(actor):
    def run(seed, worker_index=1):
        worker = RolloutWorker(
            "CartPole-v1",
            actor,
            num_envs=2,
            rollout_fragment_length=30,
            seed=seed,
            worker_index=worker_index,
        )
        return [worker.sample()[0] for _ in range(2)]

    first, again = run(3), run(3)
    for a, b in zip(first, again, strict=True):
        assert a.columns == b.columns
        for name in a.columns:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert not np.array_equal(run(4)[0]["obs"], first[0]["obs"])
    assert not np.array_equal(run(3, worker_index=2)[0]["obs"], first[0]["obs"])


def test_copies_of_one_policy_object_explore_differently_without_a_seed(actor):
    policy = actor(ChainEnv.observation_space, ChainEnv.action_space)
    actions = [
        RolloutWorker(ChainEnv, policy, rollout_fragment_length=64, worker_index=i).sample()[0][
            "actions"
        ]
        for i in (1, 2)
    ]
    assert not np.array_equal(*actions)


def test_an_env_that_raises_is_rebuilt_and_counted():
    worker = RolloutWorker(
        ChainEnv,
        keeping_next_obs(ppo),
        rollout_fragment_length=10,
        seed=0,
        env_config={"fail_at": 4, "terminate_at": 5},
    )
    batch, metrics = worker.sample()
    # each new env fails on its 4th step call: the failing env was replaced
    assert metrics["env_errors"] == 2
    np.testing.assert_array_equal(batch["truncateds"], np.isin(np.arange(10), [3, 7]))
    assert batch["rewards"][3] == 0.0
    np.testing.assert_array_equal(batch["next_obs"][3], batch["obs"][3])
    np.testing.assert_array_equal(batch["t"], [0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    assert metrics["episode_lengths"] == []  # crashed episodes are not reported
    totals = worker.get_metrics()
    assert totals["env_errors"] == 2 and totals["env_steps"] == 10 and totals["episodes"] == 0


@pytest.mark.parametrize("where", ["reward", "observation"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_env_output_ends_sampling_with_the_env_and_step_named(where, value):
    worker = RolloutWorker(
        BadOutputEnv,
        ppo,
        num_envs=2,
        rollout_fragment_length=10,
        seed=0,
        env_config={"at": 6, "value": value, "where": where},
    )
    with pytest.raises(EnvError, match=rf"'BadOutputEnv' returned a non-finite {where}") as info:
        worker.sample()
    assert "sub-env 0" in str(info.value) and "from step 5 of an episode" in str(info.value)


def test_an_env_that_keeps_raising_ends_sampling():
    worker = RolloutWorker(
        ChainEnv, ppo, rollout_fragment_length=10, env_config={"fail_at": 1}, max_env_errors=2
    )
    with pytest.raises(EnvError, match="raised in step 3 times in a row"):
        worker.sample()


def test_dqn_batches_carry_next_obs_and_no_values():
    def dqn(obs_space, act_space):
        return DQNPolicy(obs_space, act_space, DQNPolicyConfig(seed=0, n_step=2))

    worker = RolloutWorker(truncating_chain, dqn, num_envs=2, rollout_fragment_length=6, seed=0)
    batch, _ = worker.sample()
    assert len(batch) == 12
    assert SampleBatch.VALUES not in batch and SampleBatch.NEXT_VALUES not in batch
    assert "discounts" in batch  # n-step postprocessing ran per env fragment


def test_weights_learning_and_helpers():
    worker = RolloutWorker("CartPole-v1", ppo, rollout_fragment_length=64, seed=0)
    other = RolloutWorker("CartPole-v1", ppo, rollout_fragment_length=64, seed=1)
    batch, _ = worker.sample()
    info = worker.learn_on_batch(batch)
    assert "total" in info
    other.set_weights(worker.get_weights())
    for name, value in worker.get_weights().items():
        np.testing.assert_array_equal(other.get_weights()[name], value)
    assert worker.ping() == "pong"
    assert worker.apply(lambda w, k: (w.worker_index, k), 5) == (0, 5)
    worker.close()


def test_a_policy_factory_must_return_a_policy():
    with pytest.raises(TypeError, match="not a Policy"):
        RolloutWorker("CartPole-v1", lambda o, a: object())
