"""Direct calls relayed per host (`hrl_tasks.scheduler.relay`) on a real cluster (every
worker on 127.0.0.1: one host): a round as one message each way, a host-mate or the
relay killed or frozen mid-round."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import hrl_tasks as hrl
from hrl_tasks.scheduler import WorkerLostError
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


class Sampler:
    """A rollout worker's stand-in: counts its calls, holds weights."""

    def __init__(self):
        self.calls, self.weights = 0, None

    def set_weights(self, weights):
        self.weights = weights

    def sample(self, sleep_s=0.0, weights=None):
        if weights is not None:
            self.weights = weights
        time.sleep(sleep_s)
        self.calls += 1
        first = None if self.weights is None else float(self.weights["w"][0])
        return os.getpid(), self.calls, first


@pytest.fixture
def fresh():
    """Its own cluster of three worker processes: the tests kill them."""
    with hrl.Engine.local(n_workers=3, threads_per_worker=1) as engine:
        yield engine


def samplers(engine, n=3):
    handles = [engine.create_worker(Sampler, resources={"CPU": 1}) for _ in range(n)]
    for handle in handles:
        handle.ready()
    assert len({h.address for h in handles}) == n  # one per worker process
    return handles


def sample_round(engine, handles, **kwargs):
    with engine.together():
        return [h.call("sample", direct=True, relay=True, **kwargs) for h in handles]


def relayed(engine):
    return dict(engine.backend.routes["call"].relayed)


def test_a_round_goes_as_one_message_and_the_weights_once(fresh):
    handles = samplers(fresh)
    for value in range(3):
        weights = fresh.share({"w": np.full(50_000, value, np.float32)})
        results = fresh.gather(sample_round(fresh, handles, weights=weights), timeout=60)
        assert [calls for _, calls, _ in results] == [value + 1] * 3
        assert [first for _, _, first in results] == [float(value)] * 3
    assert relayed(fresh) == {"rounds": 3, "calls": 9}


def test_a_direct_call_made_before_a_round_runs_before_it(fresh):
    handles = samplers(fresh)
    for handle in handles:
        handle.call("set_weights", {"w": np.full(4, 7.0, np.float32)}, direct=True)
    results = fresh.gather(sample_round(fresh, handles), timeout=60)
    assert [first for _, _, first in results] == [7.0] * 3


def test_without_together_or_relay_each_call_goes_on_its_own(fresh):
    handles = samplers(fresh)
    fresh.gather([h.call("sample", direct=True, relay=True) for h in handles], timeout=60)
    with fresh.together():
        refs = [h.call("sample", direct=True) for h in handles]
    fresh.gather(refs, timeout=60)
    assert relayed(fresh) == {}


def test_waiting_inside_together_hands_the_calls_over_first(fresh):
    handles = samplers(fresh, 2)
    with fresh.together():
        refs = [h.call("sample", direct=True, relay=True) for h in handles]
        assert [calls for _, calls, _ in fresh.gather(refs, timeout=30)] == [1, 1]


def kill_later(engine, address, after_s):
    pid = engine.client.run(os.getpid)[address]
    threading.Timer(after_s, os.kill, (pid, signal.SIGKILL)).start()


def test_a_host_mate_killed_mid_round_costs_only_its_own_call(fresh):
    handles = samplers(fresh)
    fresh.gather(sample_round(fresh, handles), timeout=60)
    relay, _, victim = (h.address for h in handles)
    kill_later(fresh, victim, 0.5)
    refs = sample_round(fresh, handles, sleep_s=2.0)
    assert [calls for _, calls, _ in fresh.gather(refs[:2], timeout=60)] == [2, 2]
    with pytest.raises(WorkerLostError):
        refs[2].result(timeout=60)
    assert handles[0].address == relay
    again = fresh.gather(sample_round(fresh, handles), timeout=60)  # the victim made again
    assert [calls for _, calls, _ in again] == [3, 3, 1]


def test_the_relay_killed_mid_round_costs_only_its_own_call(fresh):
    handles = samplers(fresh)
    fresh.gather(sample_round(fresh, handles), timeout=60)
    kill_later(fresh, handles[0].address, 0.5)
    refs = sample_round(fresh, handles, sleep_s=2.0)
    with pytest.raises(WorkerLostError):
        refs[0].result(timeout=60)
    # The mates' answers went with the relay; asked of the mates themselves, they come.
    assert [calls for _, calls, _ in fresh.gather(refs[1:], timeout=60)] == [2, 2]
    assert [h.restarts for h in handles[1:]] == [0, 0]
    again = fresh.gather(sample_round(fresh, handles), timeout=60)
    assert [calls for _, calls, _ in again] == [1, 3, 3]  # the relay's object made again


def test_plain_tasks_still_run_beside_relayed_rounds(fresh):
    handles = samplers(fresh, 2)
    refs = sample_round(fresh, handles)
    assert fresh.gather([fresh.submit(tasks.add, 1, 2)], timeout=30) == [3]
    assert len(fresh.gather(refs, timeout=30)) == 2


def test_a_frozen_relay_does_not_hold_its_mates_answers(fresh):
    handles = samplers(fresh)
    fresh.gather(sample_round(fresh, handles), timeout=60)
    pid = fresh.client.run(os.getpid)[handles[0].address]
    refs = sample_round(fresh, handles, sleep_s=1.0)
    time.sleep(0.3)
    os.kill(pid, signal.SIGSTOP)
    try:  # asked of the mates once the relay is seen silent
        assert [calls for _, calls, _ in fresh.gather(refs[1:], timeout=60)] == [2, 2]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert refs[0].result(timeout=60)[1] == 2  # its own call ends as it wakes
    assert [calls for _, calls, _ in fresh.gather(sample_round(fresh, handles), timeout=60)] == [
        3,
        3,
        3,
    ]


def test_calls_that_never_left_a_frozen_relay_fail_as_lost_and_skip_their_turn(fresh):
    handles = samplers(fresh)
    fresh.gather(sample_round(fresh, handles), timeout=60)
    pid = fresh.client.run(os.getpid)[handles[0].address]
    os.kill(pid, signal.SIGSTOP)  # the round waits, unread, in the relay's socket
    try:
        refs = sample_round(fresh, handles)
        for ref in refs[1:]:
            with pytest.raises(WorkerLostError, match="before the call got there"):
                ref.result(timeout=60)
        # Their objects go on: the turn of the call that never came was skipped.
        again = fresh.gather([h.call("sample", direct=True) for h in handles[1:]], timeout=60)
        assert [calls for _, calls, _ in again] == [2, 2]
    finally:
        os.kill(pid, signal.SIGCONT)
    refs[0].result(timeout=60)


def test_an_object_ended_leaves_no_answer_kept_for_a_relay(fresh):
    handles = samplers(fresh)
    fresh.gather(sample_round(fresh, handles), timeout=60)

    def kept(dask_worker):
        from hrl_tasks.scheduler.runtime import WorkerRuntime

        return sorted(WorkerRuntime.of(dask_worker).task_service.relayed)

    assert sum(len(ids) for ids in fresh.client.run(kept).values()) == 2  # the mates'
    for handle in handles:
        handle.kill()
    assert all(ids == [] for ids in fresh.client.run(kept).values())
