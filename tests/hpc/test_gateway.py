"""Runs on clusters asked of a real Dask Gateway (dask-gateway-server, local-process
backend, password authentication), started here with `.ci/gateway-ci.sh`.

The gateway and its clusters run this Python (`CLUSTER_PYTHON`), so that its
clusters' distributed is this client's, in a virtual environment too. In CI
(``CI=true``) a gateway that cannot start fails these; elsewhere they skip, saying why.
"""

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import pytest

import hrl_tasks
from hrl_tasks.scheduler import EngineError
from hrl_tasks.scheduler.dask_compat import close_gateway_once, gateway_closed
from tests.conftest import require_real_part

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
PORT = 18224  # not the recipe's default: a gateway of the user's own may be on that one
CLUSTER_PYTHON = sys.executable
"""The Python that runs the gateway's server and its clusters' schedulers and workers
(`.ci/gateway-ci.sh`'s GATEWAY_PYTHON): this one, whose distributed is the client's."""


def unavailable() -> str | None:
    """What the gateway's tests miss here, or None."""
    try:
        import dask_gateway  # noqa: F401
        import dask_gateway_server  # noqa: F401
    except ImportError as exc:
        return f"needs {exc.name}: pip install -e .[test]"
    return other_distributed()


def other_distributed() -> str | None:
    """Why the gateway's clusters would not run this process's distributed (Dask does
    not support a client and a scheduler of different versions), or None: asks the
    Python that runs them."""
    import distributed

    asked = [CLUSTER_PYTHON, "-c", "import distributed; print(distributed.__version__)"]
    theirs = subprocess.run(asked, capture_output=True, text=True).stdout.strip()
    if theirs != distributed.__version__:
        return (
            f"the gateway's clusters ({CLUSTER_PYTHON}) run distributed {theirs or 'none'}, "
            f"this client {distributed.__version__}: Dask needs one version on both sides"
        )
    return None


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway's client settings, as environment variables, while the gateway runs."""
    require_real_part("the Dask Gateway", unavailable())
    env = {**os.environ, "GATEWAY_PORT": str(PORT), "GATEWAY_PYTHON": CLUSTER_PYTHON}
    env["GATEWAY_DIR"] = str(tmp_path_factory.mktemp("gateway"))
    script = str(ROOT / ".ci" / "gateway-ci.sh")
    started = subprocess.run(["bash", script, "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"the gateway did not start: {started.stderr}")
    settings = dict(
        line.removeprefix("export ").split("=", 1)
        for line in started.stdout.splitlines() if line.startswith("export ")
    )  # fmt: skip
    try:
        wait_for_routes(settings)
        yield settings
    finally:
        subprocess.run(["bash", script, "stop"], env=env, capture_output=True)


@contextlib.contextmanager
def gateway_client(*args, **kwargs):
    """A ``dask_gateway.Gateway``, closed once at the end (as the engine closes its own)."""
    from dask_gateway import Gateway

    client = Gateway(*args, **kwargs)
    try:
        yield client
    finally:
        close_gateway_once(client)


def wait_for_routes(settings: dict, timeout: float = 30.0) -> None:
    """The proxy answers its health check before it routes the API: wait for the API."""
    from dask_gateway import BasicAuth

    password = settings["DASK_GATEWAY__AUTH__KWARGS__PASSWORD"]
    deadline = time.monotonic() + timeout
    while True:
        with gateway_client(
            settings["DASK_GATEWAY__ADDRESS"], auth=BasicAuth("ci", password)
        ) as probe:
            try:
                probe.cluster_options()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.25)


@pytest.fixture
def configured(gateway, monkeypatch):
    """This process reads the gateway's settings from Dask's configuration."""
    for name, value in gateway.items():
        monkeypatch.setenv(name, value)
    dask.config.refresh()
    yield gateway
    monkeypatch.undo()
    dask.config.refresh()


def running_clusters() -> list[str]:
    with gateway_client() as gateway:
        return sorted(c.name for c in gateway.list_clusters())


def hrl_tasks_command(*args, env: dict) -> subprocess.Popen:
    # With SIGINT's default action, whatever this process inherited (a shell's background
    # job ignores it, and Python then leaves it ignored): the test sends it.
    return subprocess.Popen([sys.executable, "-m", "hrl_tasks.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


@pytest.mark.once
@pytest.mark.timeout(300)
def test_ppo_trains_to_its_threshold_on_a_gateway_cluster_that_ends_with_the_run(
    configured, tmp_path
):
    out = tmp_path / "run"
    proc = hrl_tasks_command(
        "train", "ppo", "--env", "CartPole-v1", "--stop-reward", "450", "--stop-iters", "300",
        "--gateway", "--out", str(out), "--no-progress", env=dict(os.environ),
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=280)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Exception ignored" not in stderr, stderr[-3000:]  # no finalizer's traceback
    assert "asking the gateway" in stdout and "gateway cluster: " in stdout
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["episode_return_mean"] >= 450
    name = stdout.split("gateway cluster: ")[1].split()[0]
    assert name not in running_clusters()


@pytest.mark.timeout(60)
def test_a_wrong_password_is_refused_in_one_line_before_any_cluster(configured):
    before = running_clusters()
    env = {**os.environ, "DASK_GATEWAY__AUTH__KWARGS__PASSWORD": "not-the-password"}
    proc = hrl_tasks_command("train", "ppo", "--gateway", "--stop-iters", "1", env=env)
    stdout, stderr = proc.communicate(timeout=50)
    assert proc.returncode == 2
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "refused the credentials (HTTP 401" in stderr and "gateway.auth" in stderr
    assert running_clusters() == before


@pytest.mark.timeout(60)
def test_an_option_the_gateway_does_not_offer_fails_naming_those_it_does(configured):
    with pytest.raises(EngineError, match="offers no cluster option worker_gpus; it offers: none"):
        hrl_tasks.Engine.from_gateway(options={"worker_gpus": 1})
    from hrl_tasks.cli import main

    assert main(["train", "ppo", "--stop-iters", "1", "--gateway-opt", "x=1"]) == 2


@pytest.mark.timeout(120)
def test_two_runs_at_once_get_two_clusters_that_do_not_see_each_others_workers(configured):
    from distributed import get_worker

    with (
        hrl_tasks.Engine.from_gateway(workers=1) as first,
        hrl_tasks.Engine.from_gateway(workers=1) as second,
    ):
        assert first.cluster.name != second.cluster.name
        assert {first.cluster.name, second.cluster.name} <= set(running_clusters())
        mine, theirs = set(first.worker_addresses()), set(second.worker_addresses())
        assert mine and theirs and not mine & theirs
        where = first.gather([first.submit(lambda: get_worker().address) for _ in range(4)])
        assert set(where) <= mine
        # The workers declare their threads, as the embedded cluster's do.
        assert all(r["declared"]["CPU"] == 1.0 for r in first.resources().values())
    assert not {first.cluster.name, second.cluster.name} & set(running_clusters())
    # Collected after closing, the engines' gateway clients print no finalizer's error.
    unraised = []
    before, sys.unraisablehook = sys.unraisablehook, unraised.append
    try:
        del first, second
        gc.collect()
    finally:
        sys.unraisablehook = before
    assert not unraised, [f"{u.object}: {u.exc_value!r}" for u in unraised]


def wait_for_line(proc, text: str, timeout: float) -> str:
    """Read ``proc``'s output until a line holds ``text``; returns that line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"{text!r} not printed; stderr: {proc.stderr.read()[-2000:]}")


@pytest.mark.timeout(180)
def test_ctrl_c_leaves_no_cluster_behind(configured, tmp_path):
    env = dict(os.environ)
    argv = [
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--gateway",
        "--no-progress",
        "--stop-iters",
        "10000",
    ]
    # Mid-run: after the first iteration's checkpoint folder exists.
    proc = hrl_tasks_command(*argv, "--out", str(tmp_path / "run"), env=env)
    name = wait_for_line(proc, "gateway cluster: ", 120).split("gateway cluster: ")[1].split()[0]
    wait_for_line(proc, "writing to", 60)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert name not in running_clusters()
    # While the cluster is being created: the interrupt waits for its name, then ends it.
    before = running_clusters()
    proc = hrl_tasks_command(*argv, "--out", str(tmp_path / "second"), env=env)  # a new run
    wait_for_line(proc, "asking the gateway", 60)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert running_clusters() == before


@pytest.mark.timeout(180)
def test_adaptive_scaling_follows_the_engines_work_and_keeps_its_stateful_workers(configured):
    from distributed import get_worker

    from hrl_tasks.scheduler.downscaling import busy_workers

    class Counter:
        def __init__(self):
            self.n = 0

        def add(self):
            self.n += 1
            return self.n, get_worker().address

    with hrl_tasks.Engine.from_gateway(workers=1, adapt=(1, 3), scale_down_after_s=3) as engine:
        holder = engine.create_worker(Counter)
        home = holder.call("add").result(timeout=60)[1]
        # Six tasks of two seconds (direct route: Dask's scheduler sees none of them).
        refs = [engine.submit(time.sleep, 2) for _ in range(6)]
        deadline = time.monotonic() + 90
        while len(engine.worker_addresses()) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(engine.worker_addresses()) == 3
        engine.gather(refs, timeout=90)
        assert home in engine.client.run_on_scheduler(busy_workers)
        # Only the stateful worker is left: back to one worker, and it is its home.
        deadline = time.monotonic() + 60
        while len(engine.worker_addresses()) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert engine.worker_addresses() == [home]
        assert holder.call("add").result(timeout=30) == (2, home)


@pytest.mark.timeout(90)
def test_a_kept_cluster_outlives_its_engine_and_is_reached_by_name(configured):
    with hrl_tasks.Engine.from_gateway(workers=1, keep=True) as engine:
        name = engine.cluster.name
        assert engine.submit(len, [1, 2, 3]).result(timeout=60) == 3
    assert name in running_clusters()
    with gateway_client() as gateway:
        kept = gateway.connect(name)
        kept.shutdown()
        gateway_closed(kept.gateway)
    assert name not in running_clusters()
