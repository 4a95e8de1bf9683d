"""Every socket an embedded engine listens on is on the loopback: nothing of it is
reachable from another machine (an unsecured Dask server runs whatever code reaches it)."""

import ipaddress
import os

import psutil
import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


def process_tree() -> list[psutil.Process]:
    """This process and every process under it (the nannies' worker processes too)."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def listening_sockets() -> list[tuple[int, str, int]]:
    """(pid, host, port) of each TCP socket the process tree listens on."""
    found = []
    for proc in process_tree():
        try:
            connections = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found.append((proc.pid, conn.laddr.ip, conn.laddr.port))
    return found


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host.split("%")[0]).is_loopback


def not_on_loopback(sockets) -> list[str]:
    """The sockets of ``sockets`` reachable from elsewhere, each as pid host:port."""
    return [f"pid {pid} {host}:{port}" for pid, host, port in sockets if not is_loopback(host)]


def exercise(engine) -> None:
    """Open every listener the engine opens lazily: a task on each route, a stateful
    worker's call, the live page."""
    assert engine.submit(tasks.inc, 1).result() == 2
    assert engine.submit(tasks.inc, 2, route="dask").result() == 3
    counter = engine.create_worker(tasks.Counter)
    assert counter.call("add", 3).result() == 3
    assert engine.page_link.startswith("http://127.0.0.1:")


EMBEDDED = {
    "default": {},
    "two workers": {"n_workers": 2},
    "two threads": {"n_workers": 1, "threads_per_worker": 2},
    "one resource dict": {"n_workers": 2, "resources": {"GPU": 1}},
    "a resource dict per worker": {"resources": [{"CPU": 1}, {"CPU": 1, "GPU": 1}]},
    "the dask route": {"n_workers": 1, "route": "dask"},
}


def check_loopback_only() -> None:
    """Fail naming each socket of the process tree that listens beyond the loopback."""
    sockets = listening_sockets()
    assert len(sockets) >= 3  # the scheduler, its dashboard, a worker at least
    exposed = not_on_loopback(sockets)
    assert not exposed, f"listening beyond the loopback: {', '.join(exposed)}"


@pytest.mark.parametrize("kwargs", EMBEDDED.values(), ids=EMBEDDED.keys())
def test_an_embedded_engine_listens_on_the_loopback_only(kwargs):
    with hrl.Engine.local(**kwargs) as engine:
        exercise(engine)
        check_loopback_only()


def test_workers_of_their_own_resources_take_the_clusters_protocol_and_security():
    from distributed.security import Security

    resources = [{"CPU": 1}, {"CPU": 1, "GPU": 1}]
    with hrl.Engine.local(
        resources=resources, protocol="tls://", security=Security.temporary()
    ) as engine:
        exercise(engine)
        check_loopback_only()
        workers = engine.client.scheduler_info()["workers"]
        assert len(workers) == 2
        assert all(address.startswith("tls://127.0.0.1:") for address in workers)


def test_a_learner_group_on_an_embedded_cluster_listens_on_the_loopback_only():
    from hrl_tasks.algorithms import PPO

    settings = {"num_workers": 1, "rollout_fragment_length": 32, "train_batch_size": 64}
    settings |= {"minibatch_size": 32, "num_sgd_iter": 1, "seed": 3, "num_learners": 2}
    with PPO(settings) as algo:
        algo.train()  # the learners' group stays formed until the algorithm stops
        pids = algo.engine.client.run(os.getpid)  # by worker address
        learners = {pids[handle.address] for handle in algo.workers.learner_group.handles}
        sockets = listening_sockets()
        check_loopback_only()
    by_learner = [sum(pid == learner for pid, _, _ in sockets) for learner in learners]
    assert min(by_learner) >= 3  # its worker, the worker's HTTP server, the group's
