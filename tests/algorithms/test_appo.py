"""APPO: IMPALA's plan with the clipped-surrogate policy, on a real cluster."""

import pytest

import hrl_tasks
from hrl_tasks.algorithms.appo import APPO
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.policies import APPOPolicy
from tests.algorithms.test_impala import TINY  # IMPALA's small settings fit APPO too


def test_config_checks():
    with pytest.raises(ConfigError, match="APPOConfig.clip must be > 0"):
        APPO({"clip": 0})
    with pytest.raises(ConfigError, match="APPOConfig.num_workers must be >= 1"):
        APPO({"num_workers": 0})


@pytest.mark.cluster
def test_smoke(engine):
    algo = APPO({**TINY, "num_sgd_iter": 2}, engine=engine)
    try:
        assert isinstance(algo.policy, APPOPolicy)
        first, second = algo.train(), algo.train()
        assert second["iteration"] == 2
        assert second["env_steps_sampled"] > first["env_steps_sampled"] >= 128
        assert second["env_steps_trained"] > 0 and second["info"]["learner_steps"] >= 1
        info = second["info"]
        assert {"loss_policy", "clip_fraction", "mean_rho", "learner_queue_size"} <= set(info)
        assert info["num_sgd_steps"] == 2.0
        assert algo.evaluate(episodes=2)["evaluation_episodes"] == 2
    finally:
        algo.stop()
    assert not algo.learner.is_alive()


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_appo_learns_cartpole(engine):
    """APPO reaches a mean return of 150 with a fixed seed (about 27k steps and a few
    seconds here; docs/learning.md has 450); asynchronous sampling makes the steps vary
    from run to run, hence the wide budget."""
    algo, result = hrl_tasks.train(
        "appo",
        env="CartPole-v1",
        engine=engine,
        stop={"episode_return_mean": 150, "env_steps_sampled": 200_000},
        num_workers=2,
        seed=1,
    )
    algo.stop()
    assert result["episode_return_mean"] >= 150, result
