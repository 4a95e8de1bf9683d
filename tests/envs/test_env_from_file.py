"""Env ids read from files: only modules of installed distributions are imported unasked."""

import sys

import pytest

from hrl_tasks.envs.make import UntrustedEnvError, check_env_from_file, imported_module


def test_the_module_an_id_imports():
    assert imported_module("mymodule:MyEnv-v0") == "mymodule"
    assert imported_module("pettingzoo.classic.tictactoe_v3") == "pettingzoo.classic.tictactoe_v3"
    assert imported_module("CartPole-v1") is None
    assert imported_module("ALE/Pong-v5") is None
    assert imported_module("tictactoe_v3") is None


def test_ids_that_import_no_file_of_the_working_directory_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for env in (
        "CartPole-v1",
        "tictactoe_v3",
        "ALE/Pong-v5",
        "pettingzoo.classic.tictactoe_v3",
        "gymnasium.envs.classic_control:CartPole-v1",
        None,
    ):
        check_env_from_file(env, tmp_path / "run.hrl")


@pytest.mark.parametrize("env", ["mymodule:MyEnv-v0", "mymodule.games.chess_v0"])
def test_a_module_no_distribution_provides_is_refused_unless_trusted(tmp_path, monkeypatch, env):
    (tmp_path / "mymodule.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UntrustedEnvError) as refused:
        check_env_from_file(env, tmp_path / "run.hrl")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'run.hrl'}: its env {env!r}")
    assert "trust_env_modules=True" in message and "--trust-env-modules" in message
    check_env_from_file(env, tmp_path / "run.hrl", trust=True)
    assert "mymodule" not in sys.modules


def test_a_file_of_the_working_directory_shadowing_an_installed_module_is_refused(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "pip", raising=False)  # imported, it would not be again
    check_env_from_file("pip:Nothing-v0", tmp_path / "run.hrl")  # pip is installed
    (tmp_path / "pip.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UntrustedEnvError, match="'pip:Nothing-v0' would import the module 'pip'"):
        check_env_from_file("pip:Nothing-v0", tmp_path / "run.hrl")
