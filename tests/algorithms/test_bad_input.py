"""Bad envs end a run with one clear error: never training on NaN, never a hang."""

import time

import psutil
import pytest

from hrl_tasks.algorithms import DQN, ES, PPO, ConfigError
from hrl_tasks.cli import main
from hrl_tasks.policies import UnsupportedSpaceError
from hrl_tasks.rollout import EnvError, register_env
from tests.rollout.envs import BadOutputEnv

TINY = {"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 0}


def child_processes() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_an_action_space_the_algorithm_cannot_use_fails_before_a_cluster_starts():
    before = child_processes()
    start = time.perf_counter()
    with pytest.raises(UnsupportedSpaceError, match="DQN needs a Discrete action space"):
        DQN({"env": "Pendulum-v1", **TINY})
    assert time.perf_counter() - start < 5
    assert child_processes() <= before  # no worker process was started


def test_a_learner_group_where_there_can_be_none_fails_before_a_cluster_starts():
    before = child_processes()
    with pytest.raises(ConfigError, match=r"dqn cannot learn in a learner group: set num_learn"
                                          r"ers=0 .*\(ppo, a3c, impala, appo, apex, sac, td3, alphazero\)"):  # fmt: skip
        DQN({**TINY, "num_learners": 2})
    with pytest.raises(ConfigError, match="num_learners is for single-agent envs"):
        PPO({**TINY, "env": "tictactoe_v3", "num_learners": 2})
    with pytest.raises(
        ConfigError, match=r"PPOConfig.learner_resources must be dict \| None, got .GPU."
    ):
        PPO({**TINY, "num_learners": 2, "learner_resources": "GPU"})
    with pytest.raises(ConfigError, match="ESConfig.record_experience must be None: no rollout"):
        ES({"record_experience": "unused"})
    assert child_processes() <= before


def test_the_command_line_reports_unsupported_spaces_in_one_line(capsys):
    assert main(["train", "dqn", "--env", "Pendulum-v1", "--stop-iters", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hrl-tasks: error: DQN needs a Discrete action space")
    assert "\n" not in err


@pytest.mark.cluster
@pytest.mark.parametrize("where", ["reward", "observation"])
def test_nan_from_a_remote_env_ends_training_with_the_env_named(engine, where):
    register_env("NaNLater-v0", BadOutputEnv, kwargs={"at": 40, "where": where})
    algo = PPO({"env": "NaNLater-v0", **TINY, "train_batch_size": 32}, engine=engine)
    try:
        with pytest.raises(EnvError, match=f"'NaNLater-v0' returned a non-finite {where}"):
            for _ in range(10):  # the env steps 40 times before it returns NaN
                algo.train()
    finally:
        algo.stop()


@pytest.mark.cluster
def test_nan_in_an_es_evaluation_is_named(engine):
    register_env("NaNRewardLater-v0", BadOutputEnv, kwargs={"at": 3})
    algo = ES({"env": "NaNRewardLater-v0", "num_perturbations": 2, "seed": 0}, engine=engine)
    try:
        with pytest.raises(EnvError, match="'NaNRewardLater-v0' returned a non-finite reward"):
            algo.train()
    finally:
        algo.stop()
