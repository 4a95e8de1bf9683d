"""Every algorithm on a real cluster with real gymnasium envs: smoke, checkpoints, learning."""

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import A2C, A3C, DQN, PPO, ApeX, CheckpointError

pytestmark = pytest.mark.cluster

TINY = {"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 3}


@pytest.mark.parametrize(
    "algo_cls, extra",
    [
        (PPO, {"train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}),
        (A2C, {"train_batch_size": 64}),
        (A3C, {"min_steps_per_report": 64}),
        (
            DQN,
            {
                "learning_starts": 64,
                "train_steps_per_round": 2,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
            },
        ),
        (
            DQN,
            {
                "learning_starts": 64,
                "train_steps_per_round": 2,
                "min_steps_per_report": 64,
                "prioritized_replay": True,
                "n_step": 3,
                "hidden": (32, 32),
            },
        ),
        (
            ApeX,
            {
                "learning_starts": 64,
                "min_steps_per_report": 64,
                "hidden": (32, 32),
                "num_replay_shards": 2,
                "train_batch_size": 32,
            },
        ),
    ],
)
def test_smoke(engine, algo_cls, extra):
    algo = algo_cls({**TINY, **extra}, engine=engine)
    try:
        first, second = algo.train(), algo.train()
        assert second["iteration"] == 2
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 64
        assert second["env_steps_trained"] > 0
        for key in ("episode_return_mean", "episode_len_mean", "time_s", "engine", "info"):
            assert key in second
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
    finally:
        algo.stop()


def test_ppo_continuous_actions_on_pendulum(engine):
    algo = PPO(
        {**TINY, "env": "Pendulum-v1", "train_batch_size": 64, "minibatch_size": 32}, engine=engine
    )
    try:
        result = algo.train()
        assert result["env_steps_sampled"] >= 64
        assert result["info"] and all(np.isfinite(v) for v in result["info"].values())
    finally:
        algo.stop()


def test_save_and_restore_continue_exactly(engine, tmp_path):
    config = {**TINY, "train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}
    first = PPO(config, engine=engine)
    try:
        first.train()
        first.train()
        path = first.save(tmp_path / "ckpt.hrl")
        state = first.get_state()
    finally:
        first.stop()
    second = PPO(config, engine=engine)
    try:
        second.restore(tmp_path)
        restored = second.get_state()
        assert restored["iteration"] == 2
        assert restored["flow"]["counters"] == state["flow"]["counters"]
        flat_a, flat_b = _flatten(state["policy"]), _flatten(restored["policy"])
        assert flat_a.keys() == flat_b.keys()
        for key in flat_a:
            np.testing.assert_array_equal(flat_a[key], flat_b[key], err_msg=key)
        assert second.train()["iteration"] == 3
    finally:
        second.stop()
    assert path.exists()


def test_corrupted_checkpoint_is_named(engine, tmp_path):
    bad = tmp_path / "broken.hrl"
    bad.write_bytes(b"\x93\x01\x02 definitely not a checkpoint")
    algo = PPO({**TINY, "num_workers": 1}, engine=engine)
    try:
        with pytest.raises(CheckpointError, match="broken.hrl"):
            algo.restore(bad)
        with pytest.raises(CheckpointError, match="no checkpoint"):
            algo.restore(tmp_path / "missing.hrl")
    finally:
        algo.stop()


def test_unknown_env_fails_before_any_cluster_starts():
    with pytest.raises(ValueError, match="CartPole-v1"):
        PPO({"env": "CartPol-v1"})


@pytest.mark.timeout(240)
def test_ppo_learns_cartpole(engine):
    """The one real learning check in CI: PPO reaches a mean return of 150 with a fixed seed."""
    algo, result = hrl_tasks.train(
        "ppo",
        env="CartPole-v1",
        engine=engine,
        stop={"episode_return_mean": 150, "env_steps_sampled": 60_000},
        num_workers=2,
        seed=1,
    )
    algo.stop()
    assert result["episode_return_mean"] >= 150, result


def _flatten(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}/{k}"))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_flatten(v, f"{prefix}/{i}"))
    else:
        out[prefix] = np.asarray(tree)
    return out
