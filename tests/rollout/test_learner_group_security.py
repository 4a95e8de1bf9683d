"""A learner group inside the security of its cluster: gloo's plaintext channels on a
TLS cluster only with consent (or under a runner), and with a warning."""

import warnings

import pytest

import hrl_tasks
from hrl_tasks.algorithms import PPO
from hrl_tasks.errors import ConfigError
from hrl_tasks.rollout.learner_group import (
    LearnerGroup,
    PlaintextLearnerGroupWarning,
    learner_group_exposure,
    warn_plaintext_once,
)
from tests.rollout.test_learner_group import CASES

TINY = {
    "num_workers": 1,
    "num_envs_per_worker": 2,
    "rollout_fragment_length": 32,
    "train_batch_size": 64,
    "minibatch_size": 32,
    "num_sgd_iter": 1,
    "seed": 5,
    "num_learners": 2,
}


def test_plaintext_is_refused_on_an_encrypted_cluster_unless_consented_or_a_runner():
    cases = {
        (False, False, False): "none",
        (False, True, False): "none",
        (False, False, True): "none",
        (True, False, False): "refuse",
        (True, True, False): "warn",
        (True, False, True): "warn",
        (True, True, True): "warn",
    }
    for (encrypted, opted_in, runner), want in cases.items():
        assert learner_group_exposure(encrypted, opted_in, runner) == want


def record_creations(engine, monkeypatch) -> list[str]:
    """The labels of the stateful workers ``engine`` creates from now on (each created
    as ever: the engine's own ``create_worker`` makes it)."""
    labels = []
    create = engine.create_worker

    def recorded(cls_or_factory, *args, **kwargs):
        labels.append(kwargs.get("label") or getattr(cls_or_factory, "__name__", "?"))
        return create(cls_or_factory, *args, **kwargs)

    monkeypatch.setattr(engine, "create_worker", recorded)
    return labels


def plaintext_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, PlaintextLearnerGroupWarning)]


@pytest.fixture
def tls_engine():
    """A TLS cluster of its own: a rollout worker and two learners."""
    from distributed.security import Security

    with hrl_tasks.Engine.local(
        n_workers=3, threads_per_worker=1, protocol="tls://", security=Security.temporary()
    ) as engine:
        yield engine


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_learner_group_on_a_tls_cluster_needs_consent_and_warns_once(tls_engine, monkeypatch):
    assert tls_engine.encrypted
    created = record_creations(tls_engine, monkeypatch)
    warn_plaintext_once.cache_clear()  # once per process: from this test on
    with pytest.raises(ConfigError) as refused:
        PPO(TINY, engine=tls_engine)
    said = str(refused.value)
    assert "gradients and the group's rendezvous travel unencrypted" in said
    assert "no code runs from them" in said
    assert "--set learner_group_plaintext=true" in said
    assert "learner_group_plaintext=True" in said
    assert "Learner" not in created, "refused before any learner was created"

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with PPO(TINY, engine=tls_engine, learner_group_plaintext=True) as algo:
            assert algo.train()["env_steps_trained"] == 64
            algo.train()
        tls_engine.runner = "mpi"  # as runner_engine marks a --runner run's engine
        with PPO(TINY, engine=tls_engine) as algo:  # no consent needed, no second warning
            assert algo.train()["env_steps_trained"] == 64
    assert created.count("Learner") == 4  # two groups of two
    said = plaintext_warnings(record)
    assert len(said) == 1, said
    assert "gradients and the group's rendezvous travel unencrypted" in said[0]


@pytest.mark.cluster
def test_a_learner_group_on_a_plain_cluster_neither_asks_nor_warns():
    warn_plaintext_once.cache_clear()
    with (
        hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine,
        warnings.catch_warnings(record=True) as record,
    ):
        warnings.simplefilter("always")
        assert engine.encrypted is False
        group = LearnerGroup(engine, CASES["ppo"](), 2, resources={"CPU": 1})
        group.stop()
    assert plaintext_warnings(record) == []
