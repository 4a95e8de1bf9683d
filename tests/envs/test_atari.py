"""Atari ids through the env-spec rule: the standard wrappers, uint8 batches, a CNN policy."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

from hrl_tasks.algorithms import get_algorithm
from hrl_tasks.data import SampleBatch
from hrl_tasks.data.codec import decode, encode, register_dask_serialization
from hrl_tasks.envs.atari import make_atari
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.policies.models import CNN
from hrl_tasks.rollout import RolloutWorker, UnknownEnvError, WorkerSet, env_creator, resolve_env

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

BREAKOUT = "ALE/Breakout-v5"
FRAME_BYTES = 4 * 84 * 84  # one stacked uint8 observation


def ppo(obs_space, act_space):
    return PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0, hidden=(), minibatch_size=32))


def gymnasium_wrapped(env_id):
    """What gymnasium's own wrappers make of ``env_id``, as the docs of AtariPreprocessing say."""
    gym.register_envs(ale_py)
    env = AtariPreprocessing(gym.make(env_id, frameskip=1))
    return FrameStackObservation(ClipReward(env, -1.0, 1.0), 4)


def test_an_ale_id_gets_the_standard_wrappers():
    env, expected = env_creator(BREAKOUT)(), gymnasium_wrapped(BREAKOUT)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=3)
    want, _ = expected.reset(seed=3)
    np.testing.assert_array_equal(obs, want)
    actions = np.random.default_rng(0).integers(0, env.action_space.n, 200)
    for t, action in enumerate(actions):
        obs, reward, terminated, truncated, _ = env.step(action)
        want, want_reward, want_terminated, want_truncated, _ = expected.step(action)
        np.testing.assert_array_equal(obs, want, err_msg=f"step {t}")
        assert (reward, terminated, truncated) == (want_reward, want_terminated, want_truncated)
        assert obs.dtype == np.uint8 and -1.0 <= reward <= 1.0


def test_env_config_sets_the_wrappers_options():
    env = env_creator(BREAKOUT, {"frame_stack": 2, "screen_size": 64, "clip_rewards": False})()
    assert env.observation_space.shape == (2, 64, 64)
    assert not any(isinstance(w, ClipReward) for w in wrappers(env))
    assert env.unwrapped._frameskip == 1  # AtariPreprocessing skips frames itself


def wrappers(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_an_unknown_ale_id_suggests_neighbours_and_the_package():
    with pytest.raises(
        UnknownEnvError, match=r"did you mean 'ALE/Breakout-v5'.*hrl_tasks\[atari\]"
    ):
        resolve_env("ALE/Breakuot-v5")


def test_a_missing_ale_py_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py now fails
    with pytest.raises(UnknownEnvError, match=r"need ale-py.*pip install 'hrl_tasks\[atari\]'"):
        resolve_env(BREAKOUT)
    with pytest.raises(ModuleNotFoundError, match=r"need ale-py.*hrl_tasks\[atari\]"):
        make_atari(BREAKOUT)


def test_other_envs_do_not_import_ale_py():
    code = (
        "import sys; from hrl_tasks.rollout import make_env; make_env('CartPole-v1').close(); "
        "assert 'ale_py' not in sys.modules, 'ale_py imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_batches_carry_uint8_frames_and_encode_at_a_byte_a_pixel():
    worker = RolloutWorker(BREAKOUT, ppo, num_envs=2, rollout_fragment_length=16, seed=0)
    batch, _ = worker.sample()
    assert batch[SampleBatch.OBS].dtype == np.uint8
    assert batch[SampleBatch.OBS].nbytes == len(batch) * FRAME_BYTES
    assert SampleBatch.NEXT_OBS not in batch.columns  # an actor-critic never reads it
    encoded = encode(batch)
    other_bytes = sum(a.nbytes for n, a in batch.items() if n != "obs")
    per_row = (len(encoded) - other_bytes) / len(batch)
    assert FRAME_BYTES <= per_row < FRAME_BYTES + 64  # one frame stack per row, as bytes
    decoded = decode(encoded)
    assert decoded[SampleBatch.OBS].dtype == np.uint8
    np.testing.assert_array_equal(decoded[SampleBatch.OBS], batch[SampleBatch.OBS])
    frames = dask_frames(batch)  # between processes: the columns' bytes, nothing more
    assert sum(memoryview(f).nbytes for f in frames) == sum(a.nbytes for a in batch.values())


def test_frames_are_copied_once_between_the_env_and_the_learner():
    """Bytes copied per frame: the env's frame into the batch's column as the worker
    steps, and nothing after: the message goes out from the column's memory, and the
    learner reads the frames where the socket read left them."""
    from distributed.protocol import dumps, loads, to_serialize

    worker = RolloutWorker(BREAKOUT, ppo, num_envs=2, rollout_fragment_length=16, seed=0)
    batch, _ = worker.sample()
    sent = list(dumps({"result": to_serialize(batch)}))
    obs_frames = [f for f in sent if memoryview(f).nbytes == batch[SampleBatch.OBS].nbytes]
    assert len(obs_frames) == 1
    assert np.shares_memory(np.frombuffer(obs_frames[0], np.uint8), batch[SampleBatch.OBS])
    received = [bytearray(f) for f in sent]  # what Dask's TCP read leaves (comm/tcp.py)
    got = loads(received)["result"][SampleBatch.OBS]
    np.testing.assert_array_equal(got, batch[SampleBatch.OBS])
    buffer = next(f for f in received if len(f) == got.nbytes)
    assert np.shares_memory(got, np.frombuffer(buffer, np.uint8))
    tensor = worker.policy.obs_tensor(got)
    assert tensor.dtype == torch.uint8 and tensor.data_ptr() == got.ctypes.data


def dask_frames(batch):
    """The frames Dask sends for ``batch`` (through the codec, not pickle)."""
    from distributed.protocol.serialize import serialize

    register_dask_serialization()
    header, frames = serialize(batch, serializers=["dask"])
    assert header["serializer"] == "dask"
    return frames


def test_the_learner_feeds_uint8_to_the_cnn():
    worker = RolloutWorker(BREAKOUT, ppo, num_envs=2, rollout_fragment_length=16, seed=0)
    batch = decode(encode(worker.sample()[0]))  # as it arrives from another process
    policy = worker.policy
    seen = []
    policy.model.encoder.register_forward_pre_hook(lambda _, args: seen.append(args[0].dtype))
    info = policy.learn_on_batch(batch)
    assert seen and set(seen) == {torch.uint8}
    assert info["num_sgd_steps"] == 4 and np.isfinite(info["total"])


def test_the_cnn_reads_stacked_frames_channels_first():
    first, last = CNN((4, 84, 84), channels_first=True), CNN((84, 84, 4))
    last.load_state_dict(first.state_dict())
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(first(frames), last(frames.permute(0, 2, 3, 1)))


@pytest.mark.parametrize("algorithm", ["ppo", "impala", "appo"])
def test_algorithms_build_the_cnn_for_ale_ids_without_extra_config(algorithm):
    algo = get_algorithm(algorithm).for_acting({"env": BREAKOUT})
    assert isinstance(algo.policy.model.encoder, CNN) and algo.policy.model.encoder.channels_first
    env = env_creator(BREAKOUT)()
    obs, _ = env.reset(seed=0)
    action = algo.compute_single_action(obs)
    assert env.action_space.contains(action)
    actions, extras = algo.policy.compute_actions(np.stack([obs, obs]))
    assert actions.shape == (2,) and extras[SampleBatch.VALUES].shape == (2,)


@pytest.mark.cluster
def test_remote_rollout_workers_make_ale_envs(engine):
    with WorkerSet(engine, BREAKOUT, ppo, num_workers=1, num_envs_per_worker=2,
                   rollout_fragment_length=8, seed=0) as workers:  # fmt: skip
        [(batch, metrics)] = engine.gather(workers.sample())
    assert metrics["worker_index"] == 1 and len(batch) == 16
    assert batch[SampleBatch.OBS].dtype == np.uint8
    assert batch[SampleBatch.OBS].shape == (16, 4, 84, 84)
