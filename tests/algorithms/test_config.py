import pytest

from hrl_tasks.algorithms import A3CConfig, ConfigError, PPOConfig, get_algorithm, stop_reached


def test_unknown_key_names_the_key_the_nearest_and_the_allowed():
    with pytest.raises(ConfigError) as info:
        PPOConfig.from_dict({"learning_rate": 0.1})
    message = str(info.value)
    assert (
        "'learning_rate'" in message
        and "Allowed keys:" in message
        and "train_batch_size" in message
    )


def test_typo_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'num_workers'"):
        PPOConfig.from_dict(num_worker=2)


def test_wrong_types_are_named():
    with pytest.raises(ConfigError, match=r"PPOConfig.num_workers must be int, got '2'"):
        PPOConfig.from_dict(num_workers="2")
    with pytest.raises(ConfigError, match="lr must be float"):
        PPOConfig.from_dict(lr="fast")
    with pytest.raises(ConfigError, match="normalize_advantages"):
        PPOConfig.from_dict(normalize_advantages=1)


def test_coercions_that_lose_nothing():
    config = PPOConfig.from_dict(lr=1, hidden=[32, 32], seed=None, target_kl=0.02)
    assert config.lr == 1.0 and isinstance(config.lr, float)
    assert config.hidden == (32, 32) and config.seed is None
    assert A3CConfig.from_dict(num_async=2).num_async == 2


def test_unknown_algorithm():
    with pytest.raises(ConfigError, match="available: a2c, a3c, .*ppo"):
        get_algorithm("ppo2")


def test_stop_conditions():
    assert stop_reached({"episode_return_mean": 451.0}, {"episode_return_mean": 450})
    assert not stop_reached({"episode_return_mean": float("nan")}, {"episode_return_mean": 450})
    assert stop_reached({"iteration": 3, "env_steps_sampled": 10}, {"iteration": 3})
