"""The engine's settings in dask.config's ``hrl-tasks`` section: parsed with clear
errors, set the ways Dask's own are, overridden by arguments, told with their origin."""

import copy
import os
import subprocess
import sys

import dask
import numpy as np
import pytest
import yaml
from dask.typing import no_default

import hrl_tasks as hrl
from hrl_tasks.scheduler import settings
from hrl_tasks.scheduler.taskref import Kept

ROUTE, KEEP = settings.SETTINGS["route"], settings.SETTINGS["keep-from"]


@pytest.fixture
def config():
    """Dask's configuration as it was, back after the test (which may refresh it)."""
    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


# --- pure decisions ----------------------------------------------------------------


def test_values_are_parsed_the_dask_way_and_bad_ones_say_what_would_be_right():
    seconds = settings.SETTINGS["send-interval"]
    assert settings.parse(seconds, "1ms", "here") == 0.001
    assert settings.parse(seconds, 2, "here") == 2.0
    assert settings.parse(seconds, None, "here") is None
    assert settings.parse(KEEP, "1 MiB", "here") == 2**20
    flag = settings.SETTINGS["validate"]
    assert [settings.parse(flag, v, "here") for v in ("1", "0", True, "false")] == [
        True,
        False,
        True,
        False,
    ]
    bad = [
        (ROUTE, "fast", "one of dask, direct or null"),
        (flag, "yes", "true or false"),
        (seconds, "-1s", "a duration of 0 or more"),
        (settings.SETTINGS["lost-worker-timeout"], 0, "a duration above 0"),
        (settings.SETTINGS["lost-worker-timeout"], None, "a duration above 0"),
        (KEEP, "lots", "a size of 0 or more"),
        (KEEP, -5, "a size of 0 or more"),
    ]
    for setting, raw, right in bad:
        with pytest.raises(ValueError, match=f"{setting.key} is .* \\(from MY_PLACE\\)") as err:
            settings.parse(setting, raw, "MY_PLACE")
        assert right in str(err.value)


def test_where_a_value_comes_from_follows_dask_s_order_under_the_argument_and_alias():
    files = [("/etc/dask/a.yaml", {"hrl_tasks": {"route": "dask"}}), ("/home/b.yaml", {})]
    env = {"HRL_TASKS_ROUTE": "direct", "DASK_HRL_TASKS__ROUTE": "dask"}

    def where(argument=no_default, environ=env, found=files, configured="dask"):
        return settings.origin_of(ROUTE, argument, environ, found, configured, None)

    assert where("dask") == "argument"
    assert where(None) == "argument"  # None is a value (route: the usual one)
    assert where() == "HRL_TASKS_ROUTE"
    assert where(environ={"DASK_HRL_TASKS__ROUTE": "dask"}) == "DASK_HRL_TASKS__ROUTE"
    assert where(environ={}) == "/etc/dask/a.yaml"
    assert where(environ={}, found=[]) == "dask.config.set"
    assert where(environ={}, found=[], configured=None) == "default"
    assert KEEP.variable == "DASK_HRL_TASKS__KEEP_FROM"


# --- in this process's dask.config -----------------------------------------------


def test_the_shipped_defaults_are_dask_s_and_survive_a_refresh(config, monkeypatch):
    for setting in settings.SETTINGS.values():  # CI's second pass sets the aliases
        if setting.alias:
            monkeypatch.delenv(setting.alias, raising=False)
    shipped = yaml.safe_load(settings.DEFAULTS_FILE.read_text())["hrl-tasks"]
    assert set(shipped) == set(settings.SETTINGS)
    dask.config.refresh()
    assert dask.config.get("hrl-tasks.keep-from") == shipped["keep-from"]
    assert [row[2] for row in settings.report()] == ["default"] * len(settings.SETTINGS)


def test_dask_s_variables_files_and_set_reach_the_settings_and_the_alias_and_argument_win(
    config, monkeypatch, tmp_path
):
    (tmp_path / "mine.yaml").write_text("hrl-tasks:\n  stall-warning: 5s\n")
    monkeypatch.setattr(dask.config, "paths", [str(tmp_path)])
    monkeypatch.setenv("DASK_HRL_TASKS__KEEP_FROM", "1kB")
    monkeypatch.delenv("HRL_TASKS_ROUTE", raising=False)
    dask.config.refresh(paths=[str(tmp_path)])
    with dask.config.set({"hrl-tasks.route": "dask"}):
        rows = {key: (value, origin) for key, value, origin in settings.report()}
        assert rows["hrl-tasks.stall-warning"] == (5.0, str(tmp_path / "mine.yaml"))
        assert rows["hrl-tasks.keep-from"] == (1000, "DASK_HRL_TASKS__KEEP_FROM")
        assert rows["hrl-tasks.route"] == ("dask", "dask.config.set")
        monkeypatch.setenv("HRL_TASKS_ROUTE", "direct")
        assert settings.value("route") == "direct"
        assert settings.origin("route") == "HRL_TASKS_ROUTE"
        assert settings.value("route", "dask") == "dask"


def test_a_bad_value_names_the_variable_it_came_from(config, monkeypatch):
    monkeypatch.setenv("DASK_HRL_TASKS__SEND_INTERVAL", "soon")
    dask.config.refresh()
    with pytest.raises(ValueError, match="send-interval is 'soon' .*DASK_HRL_TASKS__SEND_INTERVAL"):
        settings.value("send-interval")


# --- on a real cluster and the command line ------------------------------------------


def kept_here(nbytes):
    return np.zeros(nbytes, dtype=np.uint8)


@pytest.mark.cluster
def test_an_embedded_cluster_s_engine_and_workers_take_the_settings(config):
    chosen = {"hrl-tasks.route": "dask", "hrl-tasks.keep-from": "1kB"}
    with dask.config.set(chosen), hrl.Engine.local(n_workers=1, threads_per_worker=1) as engine:
        assert engine.route == "dask"
        small = engine.submit(kept_here, 2000, route="direct")
        engine.wait([small], timeout=30)
        assert isinstance(small.outcome.result(), Kept)  # the worker's own threshold
        assert len(small.result(timeout=30)) == 2000
    with hrl.Engine.local(n_workers=1, threads_per_worker=1, route="direct") as engine:
        assert engine.route == "direct"
        small = engine.submit(kept_here, 2000)
        engine.wait([small], timeout=30)
        assert not isinstance(small.outcome.result(), Kept)


@pytest.mark.cluster
def test_verbose_prints_each_setting_and_where_it_came_from_and_a_bad_one_ends_clearly(tmp_path):
    env = {**os.environ, "DASK_HRL_TASKS__STALL_WARNING": "30s"}
    env.pop("HRL_TASKS_ROUTE", None)
    base = [sys.executable, "-m", "hrl_tasks.cli", "train", "ppo", "--stop-iters", "1"]
    run = subprocess.run(
        [*base, "--verbose", "--out", str(tmp_path / "run"), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "hrl-tasks.stall-warning: 30.0  (DASK_HRL_TASKS__STALL_WARNING)" in run.stdout
    assert "hrl-tasks.route: null  (default)" in run.stdout
    bad = subprocess.run(
        [*base, "--out", str(tmp_path / "bad")],
        env={**env, "DASK_HRL_TASKS__ROUTE": "fast"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "hrl-tasks.route is 'fast' (from DASK_HRL_TASKS__ROUTE)" in bad.stderr
    assert "Traceback" not in bad.stderr
