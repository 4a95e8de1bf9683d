"""Workers that declare different resources, and stateful workers holding them."""

import time

import pytest

import hrl_tasks as hrl
from tests.scheduler import tasks

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def mixed():
    with hrl.Engine.local(resources=[{"CPU": 1}, {"CPU": 1, "GPU": 1}]) as engine:
        yield engine


def gpu_worker(engine):
    declared = {w: r["declared"] for w, r in engine.resources().items()}
    return next(w for w, res in declared.items() if res.get("GPU"))


def test_gpu_tasks_land_only_on_the_gpu_worker(mixed):
    target = gpu_worker(mixed)
    places = mixed.gather([mixed.submit(tasks.where_am_i, resources={"GPU": 1}) for _ in range(8)])
    assert set(places) == {target}
    anywhere = mixed.gather([mixed.submit(tasks.sleep_then, i, 0.1) for i in range(8)])
    assert anywhere == list(range(8))


def test_stateful_worker_holds_its_resources_until_killed(mixed):
    learner = mixed.create_worker(tasks.Counter, resources={"GPU": 1}, name="learner")
    learner.ready(timeout=30)
    assert learner.address == gpu_worker(mixed)
    assert mixed.resources()[learner.address]["held_by_objects"] == {"GPU": 1.0}
    waiting = mixed.submit(tasks.where_am_i, resources={"GPU": 1})
    time.sleep(1.0)
    assert not waiting.done(), "a task ran on a GPU the stateful worker holds"
    learner.kill()
    assert waiting.result(timeout=30) == gpu_worker(mixed)
    assert mixed.resources()[gpu_worker(mixed)]["held_by_objects"] == {}


def test_spread_puts_two_objects_on_two_workers(mixed):
    a = mixed.create_worker(tasks.Counter, resources={"CPU": 1})
    b = mixed.create_worker(tasks.Counter, resources={"CPU": 1})
    assert {a.address, b.address} == set(mixed.client.scheduler_info()["workers"])
    a.kill()
    b.kill()
