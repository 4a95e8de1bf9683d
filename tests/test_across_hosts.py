"""The engine across hosts (tests/hosts.py): a `dask scheduler` on one network
namespace, a `dask worker` on each of three others, the driver in the root namespace
reaching them by address, as on a cluster of machines."""

import os
import time
from pathlib import Path

import pytest

import hrl_tasks as hrl
from tests.conftest import require_real_part
from tests.hosts import HostCluster, Hosts, connect, missing, worker_hosts_of

pytestmark = [pytest.mark.once, pytest.mark.cluster]


@pytest.fixture
def cluster(tmp_path):
    require_real_part("network namespaces", missing())
    with Hosts(4) as hosts:
        yield HostCluster(hosts, tmp_path)


def test_ppo_reaches_450_across_three_hosts_with_one_host_lost_mid_run(cluster):
    engine = connect(cluster, 3)
    lost = cluster.worker_hosts[0]
    try:
        assert worker_hosts_of(engine) == {h.address for h in cluster.worker_hosts}
        seen = []

        def lose_a_host(result):
            seen.append(result["iteration"])
            if result["iteration"] == 3:
                cluster.hosts.kill(lost)  # every process on it first, then its link

        algo, result = hrl.train(
            "ppo",
            env="CartPole-v1",
            engine=engine,
            callback=lose_a_host,
            stop={"episode_return_mean": 450, "time_total_s": 240},
            num_workers=3,
        )
        algo.stop()
        assert result["episode_return_mean"] >= 450, result["episode_return_mean"]
        assert seen[-1] > 3  # it went on after the loss
        assert lost.address not in worker_hosts_of(engine)
    finally:
        engine.close()


def test_impala_and_es_learn_across_the_hosts(cluster):
    engine = connect(cluster, 3)
    try:
        for name, threshold in (("impala", 150), ("es", 150)):
            algo, result = hrl.train(
                name,
                env="CartPole-v1",
                engine=engine,
                stop={"episode_return_mean": threshold, "time_total_s": 150},
                num_workers=3,
            )
            algo.stop()
            assert result["episode_return_mean"] >= threshold, (name, result)
    finally:
        engine.close()


def test_a_search_of_two_trials_runs_across_the_hosts_and_its_best_reaches_450(cluster):
    from hrl_tasks.search import grid

    engine = connect(cluster, 3)
    try:
        result = hrl.tune(
            "ppo",
            "CartPole-v1",
            space={"lr": grid([3e-4, 1e-3])},
            num_samples=1,
            config={"num_workers": 1},
            stop={"episode_return_mean": 450, "time_total_s": 200},
            engine=engine,
        )
        assert len(result.trials) == 2
        assert max(t["best"] for t in result.trials) >= 450
    finally:
        engine.close()


def test_a_partitioned_host_is_left_behind_and_the_run_goes_on(tmp_path):
    require_real_part("network namespaces", missing())
    os.environ["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] = "15s"  # read by the scheduler
    try:
        with Hosts(4) as hosts:
            cluster = HostCluster(hosts, tmp_path)
            engine = connect(cluster, 3)
            cut = cluster.worker_hosts[0]
            seen = []

            def partition(result):
                seen.append((result["iteration"], time.monotonic()))
                if result["iteration"] == 2:
                    hosts.partition(cut)  # its processes alive, unreachable

            try:
                algo, result = hrl.train(
                    "ppo",
                    env="CartPole-v1",
                    engine=engine,
                    callback=partition,
                    stop={"iteration": 12, "time_total_s": 200},
                    num_workers=3,
                )
                algo.stop()
                assert result["iteration"] == 12
                assert cut.pids(), "the partitioned host's processes were alive throughout"
                deadline = time.monotonic() + 30
                while cut.address in worker_hosts_of(engine):
                    assert time.monotonic() < deadline, "the scheduler kept the lost worker"
                    time.sleep(0.5)
            finally:
                engine.close()
    finally:
        del os.environ["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"]


def test_a_learner_group_learns_across_two_hosts(cluster):
    from hrl_tasks.rollout.learner_group import LearnerGroup
    from hrl_tasks.scheduler.relay import host_of
    from tests.rollout.test_learner_group import CASES, assert_close_weights, batch_for

    engine = connect(cluster, 3)
    try:
        make = CASES["ppo"]
        alone, driver, sampler = make(), make(), make()
        group = LearnerGroup(engine, driver, 2, resources={"CPU": 2})
        try:
            hosts = {host_of(handle.address) for handle in group.handles}
            assert len(hosts) == 2, "each learner on a host of its own"
            for seed in range(2):
                batch = batch_for(sampler, seed=seed)
                group.learn_on_batch(batch)
                alone.learn_on_batch(batch)
            group.pull_state()
            assert_close_weights(driver.get_weights(), alone.get_weights())
        finally:
            group.stop()
    finally:
        engine.close()


def bridge_bytes(cluster: HostCluster, link: str | None = None) -> int:
    """Bytes the root namespace received from the hosts (``link`` None), or bytes a
    host's link carried to it (the root side's transmit count)."""
    if link is None:
        return int(Path(f"/sys/class/net/{cluster.hosts.bridge}/statistics/rx_bytes").read_text())
    return int(Path(f"/sys/class/net/{link}/statistics/tx_bytes").read_text())


def test_data_moves_worker_to_worker_across_hosts_without_the_driver(cluster):
    import numpy as np

    engine = connect(cluster, 3)
    try:
        into_b = cluster.worker_hosts[1].link
        made = engine.submit(np.ones, 4_000_000, resources={"host1": 1})  # 32 MB, kept there
        engine.wait([made], timeout=60)
        to_driver, to_b = bridge_bytes(cluster), bridge_bytes(cluster, into_b)
        total = engine.submit(np.sum, made, resources={"host2": 1})
        assert total.result(timeout=60) == 4_000_000
        assert bridge_bytes(cluster, into_b) - to_b > 32_000_000  # it went to host 2
        assert bridge_bytes(cluster) - to_driver < 2_000_000  # not through the driver
    finally:
        engine.close()


def test_a_round_of_samples_goes_to_each_host_once_its_weights_too(tmp_path):
    import gymnasium as gym

    from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig
    from hrl_tasks.rollout import WorkerSet

    require_real_part("network namespaces", missing())
    with Hosts(3) as hosts:
        cluster = HostCluster(hosts, tmp_path, threads=1, processes=2)
        engine = connect(cluster, 4)
        try:
            env = "CartPole-v1"
            spaces = gym.make(env)
            config = PPOPolicyConfig(hidden=(1024, 1024), seed=0)
            policy = PPOPolicy(spaces.observation_space, spaces.action_space, config)
            workers = WorkerSet(engine, env, policy, 4, 1, 16, seed=0,
                                remote_policy=policy.inference_copy(), direct_calls=True)  # fmt: skip
            try:
                by_host = {}
                for handle in workers.remote_workers:
                    by_host.setdefault(handle.address.rsplit(":", 1)[0], []).append(handle)
                assert sorted(len(h) for h in by_host.values()) == [2, 2]
                size = sum(v.nbytes for v in policy.get_weights().values())  # about 8 MB
                links = [host.link for host in cluster.worker_hosts]
                relayed = engine.backend.routes["call"].relayed
                engine.gather(workers.sample(), timeout=60)  # after the first weights' sync
                for _ in range(3):
                    before = [bridge_bytes(cluster, link) for link in links]
                    rounds = relayed["rounds"]
                    workers.sync_weights(defer=True)  # the weights ride on the sample calls
                    assert len(engine.gather(workers.sample(), timeout=60)) == 4
                    assert relayed["rounds"] - rounds == 2  # one message per host
                    into = [
                        bridge_bytes(cluster, link) - b
                        for link, b in zip(links, before, strict=True)
                    ]
                    assert all(size < got < 1.5 * size for got in into), (into, size)
            finally:
                workers.stop()
        finally:
            engine.close()
