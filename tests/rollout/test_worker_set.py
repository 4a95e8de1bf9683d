"""WorkerSet on the in-process SyncEngine (fast); cluster tests: test_worker_set_cluster.py."""

import gymnasium as gym
import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import UnknownEnvError, WorkerSet, register_env
from tests.rollout.envs import ChainEnv, Tag


def ppo(obs_space, act_space):
    return PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0))


def perturbed(weights, scale=0.1, seed=0):
    rng = np.random.default_rng(seed)
    return {
        k: (v + scale * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in weights.items()
    }


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


class SubmitSpy:
    """Records the name and arguments of every task and stateful-worker call."""

    def __init__(self, engine, monkeypatch):
        self.calls = []
        submit = engine.submit

        def spy(fn, *args, name=None, **kwargs):
            self.calls.append((name, args))
            return submit(fn, *args, name=name, **kwargs)

        monkeypatch.setattr(engine, "submit", spy)
        call = engine.call

        def call_spy(handle, method, args, kwargs, *rest):
            self.calls.append((f"{handle.name}.{method}", args))
            return call(handle, method, args, kwargs, *rest)

        monkeypatch.setattr(engine, "call", call_spy)

    def named(self, name):
        return [args for called, args in self.calls if called == name]


def fake_restart(engine, handle):
    """What the engine records when it re-creates an object after losing its worker."""
    engine.state.objects[handle.obj_id].restarts += 1


@pytest.fixture
def engine():
    with hrl.SyncEngine() as eng:
        yield eng


def test_sample_gives_one_batch_per_remote_worker(engine):
    with WorkerSet(
        engine,
        "CartPole-v1",
        ppo,
        num_workers=2,
        num_envs_per_worker=2,
        rollout_fragment_length=16,
        seed=0,
    ) as workers:
        assert len(workers.remote_workers) == 2
        results = engine.gather(workers.sample())
        assert [m["worker_index"] for _, m in results] == [1, 2]
        assert all(len(batch) == 32 for batch, _ in results)
        assert not np.array_equal(results[0][0]["obs"], results[1][0]["obs"])


def test_sync_weights_is_one_broadcast_and_every_worker_gets_the_weights(engine, monkeypatch):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=3, rollout_fragment_length=8)
    spy = SubmitSpy(engine, monkeypatch)
    new = perturbed(workers.local_worker.get_weights())
    workers.sync_weights(new)
    broadcasts = spy.named("weights")
    assert len(broadcasts) == 1 and broadcasts[0][0] is new  # the weights left once
    set_calls = [a for i in (1, 2, 3) for a in spy.named(f"RolloutWorker-{i}.set_weights")]
    assert len(set_calls) == 3
    assert all(args[0] is set_calls[0][0] for args in set_calls)  # the same ref to each
    for weights in workers.foreach_worker(lambda w: w.get_weights()):
        assert_same_weights(weights, new)
    workers.stop()
    workers.stop()  # idempotent


def test_a_restarted_worker_gets_the_weights_again_before_its_next_sample(engine):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, rollout_fragment_length=8)
    new = perturbed(workers.local_worker.get_weights())
    workers.sync_weights(new)
    victim = workers.remote_workers[1]
    # What a re-creation looks like from the driver: initial weights, one more restart.
    victim.call("set_weights", perturbed(new, seed=1))
    fake_restart(engine, victim)
    engine.gather(workers.sample())
    assert workers.resyncs == 1
    for weights in workers.foreach_worker(lambda w: w.get_weights()):
        assert_same_weights(weights, new)
    engine.gather(workers.sample())
    assert workers.resyncs == 1  # only once per restart


def test_a_restarted_worker_runs_its_setup_again(engine):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, rollout_fragment_length=8)
    victim = workers.remote_workers[1]
    workers.set_worker_setup(victim, Tag("set up")).result(timeout=30)
    assert workers.foreach_worker(Tag.read, local=False) == [None, "set up"]
    victim.call("apply", Tag(None))  # what a re-created worker looks like
    fake_restart(engine, victim)
    engine.gather(workers.sample())
    assert workers.foreach_worker(Tag.read, local=False) == [None, "set up"]
    victim.call("apply", Tag(None))  # re-created again, and seen first by a weight sync
    fake_restart(engine, victim)
    workers.sync_weights()
    assert workers.foreach_worker(Tag.read, local=False) == [None, "set up"]
    with pytest.raises(ValueError, match="not a remote worker"):
        workers.set_worker_setup(object(), Tag("x"))
    workers.stop()


def test_a_policy_object_is_copied_into_each_remote_worker(engine):
    policy = ppo(ChainEnv.observation_space, ChainEnv.action_space)
    workers = WorkerSet(engine, ChainEnv, policy, num_workers=2, rollout_fragment_length=4)
    assert workers.local_worker.policy is policy
    remote = workers.foreach_worker(lambda w: id(w.policy), local=False)
    assert len(set(remote)) == 2 and id(policy) not in remote


def test_registered_names_and_unknown_ids(engine):
    register_env("HrlChainSet-v0", ChainEnv, max_episode_steps=2)
    try:
        workers = WorkerSet(engine, "HrlChainSet-v0", ppo, num_workers=1, rollout_fragment_length=4)
        ((batch, _),) = engine.gather(workers.sample())
        np.testing.assert_array_equal(batch["truncateds"], [0, 1, 0, 1])
    finally:
        gym.registry.pop("HrlChainSet-v0", None)
    with pytest.raises(UnknownEnvError, match="CartPole-v1"):
        WorkerSet(engine, "CartPol-v1", ppo, num_workers=1)


def test_without_remote_workers_sample_points_to_the_local_worker(engine):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=0, rollout_fragment_length=8)
    assert workers.sync_weights() == []
    with pytest.raises(ValueError, match="local_worker"):
        workers.sample()
    batch, _ = workers.local_worker.sample()
    assert len(batch) == 8


def test_sync_weights_to_one_worker_and_note_sampled(engine):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, rollout_fragment_length=8)
    first, second = workers.remote_workers
    start = workers.local_worker.get_weights()
    new = perturbed(start)
    workers.sync_weights(new, to=[second])
    local, one, two = workers.foreach_worker(lambda w: w.get_weights())
    assert_same_weights(local, new)
    assert_same_weights(one, start)
    assert_same_weights(two, new)
    with pytest.raises(ValueError, match="not a remote worker"):
        workers.sync_weights(to=[object()])
    fake_restart(engine, first)  # re-created: note_sampled brings it to the last weights
    workers.note_sampled(first)
    workers.note_sampled(second)
    assert workers.resyncs == 1
    assert_same_weights(workers.foreach_worker(lambda w: w.get_weights())[1], new)


def test_deferred_weights_ride_on_the_next_sample_calls(engine, monkeypatch):
    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, rollout_fragment_length=8)
    start = workers.local_worker.get_weights()
    new = perturbed(start)
    spy = SubmitSpy(engine, monkeypatch)
    assert workers.sync_weights(new, defer=True) == []
    assert spy.calls == []  # nothing sent yet
    assert_same_weights(workers.foreach_worker(lambda w: w.get_weights())[1], start)
    engine.gather(workers.sample())
    assert len(spy.named("weights")) == 1  # still one broadcast
    assert not [c for c in spy.calls if c[0] and c[0].endswith(".set_weights")]
    for weights in workers.foreach_worker(lambda w: w.get_weights()):
        assert_same_weights(weights, new)
    first, _ = workers.remote_workers
    assert workers.sample_kwargs(first) == {}  # delivered once, not again
    workers.stop()


def test_deferred_weights_reach_workers_sampled_by_parallel_rollouts(engine):
    from hrl_tasks.flow import FlowContext, ParallelRollouts

    workers = WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, rollout_fragment_length=8)
    new = perturbed(workers.local_worker.get_weights())
    workers.sync_weights(new, defer=True)
    batches = ParallelRollouts(workers, FlowContext(), mode="bulk_sync")
    assert len(next(batches)) == 16
    for weights in workers.foreach_worker(lambda w: w.get_weights()):
        assert_same_weights(weights, new)
    workers.stop()
