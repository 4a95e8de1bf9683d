"""WorkerSet on a real local cluster (two single-thread worker processes, see tests/conftest.py).

Tests that kill or slow down workers get a cluster of their own (``fresh``): a
killed worker's replacement, or earlier calls' durations (which speculation
reads), would otherwise carry over into the next test.
"""

import os
import signal
import time

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout import WorkerSet
from hrl_tasks.scheduler import clear_faults, inject_faults

pytestmark = pytest.mark.cluster


def ppo(obs_space, act_space):
    return PPOPolicy(obs_space, act_space, PPOPolicyConfig(seed=0))


def perturbed(weights, seed):
    rng = np.random.default_rng(seed)
    return {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in weights.items()}


@pytest.fixture
def fresh():
    with hrl.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        yield engine


def cartpole_workers(engine, **options):
    """Two remote CartPole workers of a PPO policy (2 envs, 32 steps unless ``options`` say)."""
    config = {"num_envs_per_worker": 2, "rollout_fragment_length": 32, **options}
    return WorkerSet(engine, "CartPole-v1", ppo, num_workers=2, seed=0, **config)


def assert_all_equal(weights_list, expected):
    for weights in weights_list:
        assert weights.keys() == expected.keys()
        for name, value in expected.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=name)


def test_sample_and_one_broadcast_weight_sync(engine):
    with cartpole_workers(engine) as workers:
        assert isinstance(workers.remote_workers, hrl.WorkerGroup)
        results = engine.gather(workers.sample())
        assert sorted(m["worker_index"] for _, m in results) == [1, 2]
        assert [len(batch) for batch, _ in results] == [64, 64]
        speculative = engine.gather(workers.sample(speculative=True))
        assert [len(batch) for batch, _ in speculative] == [64, 64]
        new = perturbed(workers.local_worker.get_weights(), seed=0)
        refs = workers.sync_weights(new)
        # Every set_weights call depends on one and the same TaskRef holding the weights.
        assert len({dep for ref in refs for dep in ref.deps}) == 1
        engine.gather(refs)
        assert_all_equal(workers.foreach_worker(lambda w: w.get_weights()), new)


def test_direct_calls_sample_and_share_one_upload_of_the_weights(engine):
    with cartpole_workers(engine, direct_calls=True) as workers:
        results = engine.gather(workers.sample(speculative=True))
        # A backup copy on the other worker may win on a loaded machine.
        assert len(results) == 2 and {m["worker_index"] for _, m in results} <= {1, 2}
        new = perturbed(workers.local_worker.get_weights(), seed=0)
        refs = workers.sync_weights(new)
        assert all(ref.direct_call for ref in refs)
        engine.gather(refs)
        shared = workers._weights_ref  # one upload: the second worker fetched it from the first
        assert isinstance(shared, hrl.Shared) and shared.holder == workers.remote_workers[0].address
        assert_all_equal(workers.foreach_worker(lambda w: w.get_weights()), new)
        deferred = perturbed(new, seed=1)
        workers.sync_weights(deferred, defer=True)  # rides on the next sample calls
        engine.gather(workers.sample())
        assert_all_equal(workers.foreach_worker(lambda w: w.get_weights()), deferred)


@pytest.mark.parametrize("direct", [False, True])
def test_a_killed_worker_is_recreated_and_resynced(fresh, direct):
    engine = fresh
    workers = cartpole_workers(
        engine, num_envs_per_worker=4, rollout_fragment_length=500, direct_calls=direct
    )
    try:
        new = perturbed(workers.local_worker.get_weights(), seed=1)
        # Waited for: a call the driver does not know ended yet counts as the running one
        # at a loss, and the sample behind it as never started (re-issued, not failed).
        engine.gather(workers.sync_weights(new), timeout=60)
        victim = workers.remote_workers[0]
        pids = engine.client.run(os.getpid)  # before sampling: the call waits for a busy worker
        # The victim's sample is made 50x slower so that it is surely in flight at the kill.
        inject_faults(engine, slow_workers={victim.address: 50.0}, names={"RolloutWorker.sample"})
        refs = workers.sample()
        time.sleep(0.2)
        assert not refs[0].done()
        os.kill(pids[victim.address], signal.SIGKILL)
        # The sample running on the killed worker fails (it is not re-issued); the other finishes.
        assert isinstance(refs[0].exception(timeout=60), hrl.WorkerLostError)
        assert refs[1].exception(timeout=60) is None
        deadline = time.monotonic() + 30
        while victim.restarts == 0:
            assert time.monotonic() < deadline, "the killed rollout worker was not re-created"
            time.sleep(0.1)
        clear_faults(engine)
        results = engine.gather(workers.sample(), timeout=60)
        assert [len(batch) for batch, _ in results] == [2000, 2000]
        assert workers.resyncs == 1
        assert_all_equal(workers.foreach_worker(lambda w: w.get_weights()), new)
    finally:
        clear_faults(engine)
        workers.stop()


@pytest.mark.parametrize("direct", [False, True])
def test_a_recreated_worker_has_the_latest_weights_before_its_first_call(fresh, direct):
    # A call queued behind the one running at the kill is re-issued on the new object
    # before the WorkerSet hears of the restart: it must not see the factory's weights.
    engine = fresh
    workers = cartpole_workers(engine, rollout_fragment_length=500, direct_calls=direct)
    try:
        new = perturbed(workers.local_worker.get_weights(), seed=2)
        engine.gather(workers.sync_weights(new), timeout=60)
        victim = workers.remote_workers[0]
        pids = engine.client.run(os.getpid)
        inject_faults(engine, slow_workers={victim.address: 50.0}, names={"RolloutWorker.sample"})
        running = victim.call("sample", direct=direct)
        queued = victim.call("get_weights", direct=direct)
        time.sleep(0.2)
        assert not running.done()
        os.kill(pids[victim.address], signal.SIGKILL)
        assert isinstance(running.exception(timeout=60), hrl.WorkerLostError)
        weights = queued.result(timeout=60)  # re-issued on the re-created object
        assert victim.restarts == 1 and workers.resyncs == 0
        assert_all_equal([weights], new)
    finally:
        clear_faults(engine)
        workers.stop()


@pytest.mark.parametrize("direct", [False, True])
def test_a_slow_rollout_worker_is_covered_by_its_peer(fresh, direct):
    engine = fresh
    with cartpole_workers(engine, direct_calls=direct) as workers:
        for _ in range(6):  # durations for the speculation planner
            engine.gather(workers.sample(speculative=True), timeout=60)
        slow = workers.remote_workers[0]
        inject_faults(engine, slow_workers={slow.address: 100.0}, names={"RolloutWorker.sample"})
        try:
            before = engine.stats()["backup_won"]
            results = engine.gather(workers.sample(speculative=True), timeout=60)
            # Both batches come from the fast worker: its own, and the slow one's backup.
            assert [m["worker_index"] for _, m in results] == [2, 2]
            assert [len(batch) for batch, _ in results] == [64, 64]
            deadline = time.monotonic() + 5  # counted just after the result is handed out
            while engine.stats()["backup_won"] == before:
                assert time.monotonic() < deadline, "the backup's win was not counted"
                time.sleep(0.01)
        finally:
            clear_faults(engine)
