"""A restored algorithm is in the state its checkpoint saved, and bad checkpoints are named."""

import json

import numpy as np
import pytest

from hrl_tasks.algorithms import (
    A2C,
    A3C,
    APPO,
    DQN,
    ES,
    IMPALA,
    PPO,
    SAC,
    TD3,
    ApeX,
    CheckpointError,
)
from hrl_tasks.algorithms.algorithm import read_checkpoint
from hrl_tasks.errors import ConfigError

pytestmark = pytest.mark.cluster

TINY = {"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 3}
SMALL_DQN = {"learning_starts": 64, "min_steps_per_report": 64, "hidden": (32, 32)}
CASES = [
    (PPO, {"train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 2}),
    (A2C, {"train_batch_size": 64}),
    (A3C, {"min_steps_per_report": 64}),
    (DQN, {**SMALL_DQN, "train_steps_per_round": 2, "epsilon_steps": 1000}),
    (IMPALA, {"train_batch_size": 64, "min_steps_per_report": 64}),
    (APPO, {"train_batch_size": 64, "min_steps_per_report": 64}),
    (ApeX, {**SMALL_DQN, "num_replay_shards": 2, "train_batch_size": 32}),
    (ES, {"num_perturbations": 2, "num_workers": 2}),
    (
        SAC,
        {
            **SMALL_DQN,
            "env": "Pendulum-v1",
            "train_batch_size": 32,
            "training_intensity": 8.0,
            "normalize_observations": True,
        },
    ),
    (TD3, {**SMALL_DQN, "env": "Pendulum-v1", "train_batch_size": 32, "training_intensity": 8.0}),
]
NOT_RESTORED = {"replay_rows"}  # replay contents are not in checkpoints (docs/engine.md)


def flatten(tree, prefix=""):
    if isinstance(tree, dict):
        return {
            k: v for key, sub in tree.items() for k, v in flatten(sub, f"{prefix}/{key}").items()
        }
    if isinstance(tree, (list, tuple)):
        return {
            k: v for i, sub in enumerate(tree) for k, v in flatten(sub, f"{prefix}/{i}").items()
        }
    return {prefix: np.asarray(tree)}


def read_epsilon(worker):
    return worker.policy.epsilon


@pytest.mark.parametrize("algo_cls, extra", CASES, ids=[c.__name__ for c, _ in CASES])
def test_a_restored_algorithm_has_the_saved_state(engine, tmp_path, algo_cls, extra):
    config = {**TINY, **extra}
    first = algo_cls(config, engine=engine)
    try:
        for _ in range(3):
            first.train()
        path = first.save(tmp_path / "checkpoint.hrl")
    finally:
        first.stop()
    saved = read_checkpoint(path)
    second = algo_cls(config, engine=engine)
    try:
        second.restore(tmp_path)
        restored = flatten(second.get_state())
        expected = flatten(saved)
        assert restored.keys() == expected.keys()
        compared = [k for k in expected if k.split("/")[1] not in NOT_RESTORED]
        # weights, optimizer, learner and worker random-number states, counters, epsilon
        assert any("/optimizer/" in k for k in compared) and any("/workers/" in k for k in compared)
        for key in compared:
            np.testing.assert_array_equal(restored[key], expected[key], err_msg=key)
        if algo_cls is DQN:  # the exploration schedule reached the rollout workers too
            epsilons = [
                h.call("apply", read_epsilon).result() for h in second.workers.remote_workers
            ]
            assert epsilons == [saved["policy"]["epsilon"]] * 2 and epsilons[0] < 1.0
        assert second.train()["iteration"] == 4
    finally:
        second.stop()


@pytest.fixture
def saved_ppo(engine, tmp_path):
    algo = PPO({**TINY, "num_workers": 1, "train_batch_size": 64}, engine=engine)
    try:
        algo.train()
        algo.save(tmp_path / "checkpoint-000001.hrl")
        yield algo, tmp_path / "checkpoint-000001.hrl"
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated mid-write by a full disk
        lambda data: data[:100] + bytes(b ^ 0xFF for b in data[100:140]) + data[140:],
        lambda data: b"",
        lambda data: b"\x93\x01\x02 definitely not a checkpoint",
    ],
    ids=["truncated", "flipped", "empty", "garbage"],
)
def test_a_damaged_checkpoint_is_named_and_left_on_disk(saved_ppo, damage):
    algo, path = saved_ppo
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)
    before = algo.get_state()
    with pytest.raises(CheckpointError, match="checkpoint-000001.hrl") as info:
        algo.restore(path)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == damaged  # nothing on disk changed
    after = algo.get_state()  # nor in the algorithm
    for key, value in flatten(before["policy"]).items():
        np.testing.assert_array_equal(flatten(after["policy"])[key], value)


def test_a_checkpoint_of_another_algorithm_or_shape_is_named(saved_ppo, engine, tmp_path):
    _, path = saved_ppo
    other = A2C({**TINY, "num_workers": 1}, engine=engine)
    try:
        with pytest.raises(CheckpointError, match="of 'ppo', not 'a2c'"):
            other.restore(path)
    finally:
        other.stop()
    wider = PPO({**TINY, "num_workers": 1, "hidden": (32,)}, engine=engine)
    try:
        with pytest.raises(CheckpointError, match="does not fit"):
            wider.restore(path)
    finally:
        wider.stop()


def test_a_missing_checkpoint_is_named(saved_ppo, tmp_path):
    algo, _ = saved_ppo
    with pytest.raises(CheckpointError, match="no checkpoint at .*missing.hrl"):
        algo.restore(tmp_path / "missing.hrl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"no checkpoint-NNNNNN\.hrl in .*empty"):
        algo.restore(tmp_path / "empty")


@pytest.mark.timeout(240)
def test_train_in_python_writes_its_run_and_never_overwrites_another(tmp_path):
    import hrl_tasks
    from hrl_tasks.run_dir import RunDirError

    out = tmp_path / "run"
    tiny = {**TINY, "num_workers": 1, "train_batch_size": 64, "minibatch_size": 32}
    every = {"checkpoint_every": 1, "keep_checkpoints": 1}
    algo, result = hrl_tasks.train("ppo", "CartPole-v1", {"iteration": 2}, out=out, **every, **tiny)
    algo.stop()
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["checkpoint-000002.hrl"]
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(RunDirError, match="resume=True.*force=True"):
        hrl_tasks.train("a2c", "CartPole-v1", out=out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    algo, result = hrl_tasks.train("ppo", "CartPole-v1", {"iteration": 3}, out=out, resume=True)
    algo.stop()
    assert result["iteration"] == 3
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    assert read_checkpoint(out / "checkpoints")["iteration"] == 3


def test_tune_in_python_refuses_a_used_out_before_any_cluster(tmp_path):
    import hrl_tasks

    (tmp_path / "trials.json").write_text("[]")
    with pytest.raises(ConfigError, match="holds another run's files.*force=True"):
        hrl_tasks.tune("ppo", "CartPole-v1", {}, out=tmp_path)
    assert (tmp_path / "trials.json").read_text() == "[]"
