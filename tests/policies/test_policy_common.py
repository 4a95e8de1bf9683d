"""Interface tests run on every policy: actions, weights, state, pickling, gradients."""

import dataclasses
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch, decode, encode
from hrl_tasks.policies import (
    CNN,
    DQNPolicy,
    DQNPolicyConfig,
    ESPolicy,
    ESPolicyConfig,
    IMPALAPolicy,
    IMPALAPolicyConfig,
    PGPolicy,
    PGPolicyConfig,
    PPOPolicy,
    PPOPolicyConfig,
    SACPolicy,
    SACPolicyConfig,
    TD3Policy,
    TD3PolicyConfig,
)
from tests.policies.synthetic import (
    cartpole_spaces,
    es_batch,
    fragment,
    pendulum_spaces,
    transitions,
)

CASES = {
    "pg": lambda seed: PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=seed)),
    "ppo_discrete": lambda seed: PPOPolicy(
        *cartpole_spaces(), PPOPolicyConfig(seed=seed, minibatch_size=16, num_sgd_iter=2)
    ),
    "ppo_continuous": lambda seed: PPOPolicy(
        *pendulum_spaces(), PPOPolicyConfig(seed=seed, minibatch_size=16, num_sgd_iter=2)
    ),
    "dqn": lambda seed: DQNPolicy(*cartpole_spaces(), DQNPolicyConfig(seed=seed, epsilon=0.5)),
    "impala": lambda seed: IMPALAPolicy(*pendulum_spaces(), IMPALAPolicyConfig(seed=seed)),
    "es": lambda seed: ESPolicy(*pendulum_spaces(), ESPolicyConfig(seed=seed, hidden=(16,))),
    "sac": lambda seed: SACPolicy(*pendulum_spaces(), SACPolicyConfig(seed=seed, hidden=(32, 32))),
    "sac_discrete": lambda seed: SACPolicy(
        *cartpole_spaces(), SACPolicyConfig(seed=seed, hidden=(32,))
    ),
    "td3": lambda seed: TD3Policy(*pendulum_spaces(), TD3PolicyConfig(seed=seed, hidden=(32, 32))),
}
NO_EXTRAS = ("dqn", "es", "sac", "sac_discrete", "td3")  # replay learners store no logp


def training_batch(name, policy):
    if name == "dqn":
        return transitions(policy, 32)
    if name == "es":
        rng = np.random.default_rng(0)
        obs = rng.normal(size=(16, 3)).astype(np.float32)
        return es_batch(policy, obs, rng.normal(size=(16, 1)), n_pairs=4, seed=0)
    return policy.postprocess_trajectory(fragment(policy, 48))


def observations(policy, n=5, seed=3):
    return (
        np.random.default_rng(seed)
        .normal(size=(n, *policy.observation_space.shape))
        .astype(np.float32)
    )


def assert_same_arrays(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(params=sorted(CASES))
def name(request):
    return request.param


def test_compute_actions_shapes_and_dtypes(name):
    policy = CASES[name](0)
    obs = observations(policy)
    for explore in (True, False):
        actions, extras = policy.compute_actions(obs, explore=explore)
        if name in ("pg", "ppo_discrete", "dqn", "sac_discrete"):
            assert actions.shape == (5,) and actions.dtype == np.int64
            assert all(policy.action_space.contains(a) for a in actions)
        else:
            assert actions.shape == (5, 1) and actions.dtype == np.float32
        if name in NO_EXTRAS:
            assert extras == {}
        else:
            assert sorted(extras) == ["logp", "values"]
            assert all(v.shape == (5,) and v.dtype == np.float32 for v in extras.values())
    greedy, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0], greedy)
    with pytest.raises(ValueError, match="shape"):
        policy.compute_actions(obs[:, :2])


def test_weights_round_trip_gives_identical_actions(name):
    source, target = CASES[name](0), CASES[name](1)
    obs = observations(source, n=32)
    before, _ = target.compute_actions(obs, explore=False)
    expected, expected_extras = source.compute_actions(obs, explore=False)
    assert not np.array_equal(before, expected)  # the seeds give different networks
    weights = decode(encode(source.get_weights()))  # read-only arrays, as on the wire
    assert all(isinstance(v, np.ndarray) for v in weights.values())
    target.set_weights(weights)
    actions, extras = target.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(actions, expected)
    assert_same_arrays(extras, expected_extras)


def test_state_restores_optimizer_and_rng(name):
    original = CASES[name](0)
    batch = training_batch(name, original)
    for _ in range(2):
        original.learn_on_batch(batch)
    state = decode(encode(original.get_state()))
    original.learn_on_batch(batch)
    expected = original.get_weights()

    restored = CASES[name](1)
    restored.set_state(state)
    restored.learn_on_batch(batch)
    assert_same_arrays(restored.get_weights(), expected)
    assert restored.num_grad_updates == original.num_grad_updates

    weights_only = CASES[name](1)  # same weights, fresh optimizer: a different step
    weights_only.set_weights(state["weights"])
    weights_only.learn_on_batch(batch)
    changed = weights_only.get_weights()
    assert any(not np.array_equal(changed[k], expected[k]) for k in expected)


def test_pickle_round_trip(name):
    policy = CASES[name](0)
    policy.learn_on_batch(training_batch(name, policy))
    copy = pickle.loads(pickle.dumps(policy))
    assert type(copy) is type(policy) and copy.config == policy.config
    assert_same_arrays(copy.get_weights(), policy.get_weights())
    obs = observations(policy, n=16)
    # The generator state travels too: the copy explores exactly like the original.
    a, extras_a = policy.compute_actions(obs)
    b, extras_b = copy.compute_actions(obs)
    np.testing.assert_array_equal(a, b)
    assert_same_arrays(extras_a, extras_b)


def test_compute_then_apply_gradients_equals_one_learning_step(name):
    one, two = CASES[name](0), CASES[name](0)
    if name.startswith("ppo"):  # one epoch of one minibatch: a single step on the whole batch
        config = dataclasses.replace(one.config, num_sgd_iter=1, minibatch_size=10**6)
        one, two = (type(p)(p.observation_space, p.action_space, config) for p in (one, two))
    batch = training_batch(name, one)
    training_batch(name, two)  # advance the generator the same way
    grads, info = one.compute_gradients(batch)
    params = list(one.model.parameters())
    assert [g.shape for g in grads] == [tuple(p.shape) for p in params]
    assert all(g.dtype == np.float32 for g in grads)
    assert any(np.abs(g).sum() > 0 for g in grads)
    assert isinstance(info["total"], float) and info["grad_norm"] > 0
    one.apply_gradients(grads)
    two.learn_on_batch(batch)
    for k, v in two.get_weights().items():
        np.testing.assert_allclose(one.get_weights()[k], v, rtol=1e-5, atol=1e-7, err_msg=k)
    with pytest.raises(ValueError, match="gradients"):
        one.apply_gradients(grads[:-1])


def test_loss_total_is_the_sum_of_its_terms(name):
    policy = CASES[name](0)
    terms = policy.loss(training_batch(name, policy))
    parts = [v for k, v in terms.items() if k.startswith("loss_")]
    assert parts and terms["total"].ndim == 0 and terms["total"].requires_grad
    torch.testing.assert_close(terms["total"], sum(parts))


def test_config_is_a_strict_dataclass(name):
    policy = CASES[name](0)
    config_cls = type(policy.config)
    assert dataclasses.is_dataclass(config_cls)
    with pytest.raises(TypeError, match="no_such_field"):
        config_cls(no_such_field=1)
    with pytest.raises(TypeError, match=config_cls.__name__):
        type(policy)(policy.observation_space, policy.action_space, {"lr": 0.1})


def test_single_thread_only_when_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    policy = PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0))
    assert calls == []
    policy = PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0), single_thread=True)
    assert calls == [1]
    pickle.loads(pickle.dumps(policy))  # a rollout process keeps the setting
    assert calls == [1, 1]


def test_value_function_only_where_there_is_one():
    pg = PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=0))
    obs = observations(pg)
    _, extras = pg.compute_actions(obs)
    np.testing.assert_allclose(pg.compute_values(obs), extras[SampleBatch.VALUES])
    with pytest.raises(NotImplementedError, match="DQNPolicy"):
        CASES["dqn"](0).compute_values(obs)


def test_image_observations_go_through_the_cnn():
    space = gym.spaces.Box(0, 255, (36, 36, 1), np.uint8)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (6, 36, 36, 1), dtype=np.uint8)
    ppo = PPOPolicy(space, gym.spaces.Discrete(3), PPOPolicyConfig(seed=0, hidden=()))
    dqn = DQNPolicy(space, gym.spaces.Discrete(3), DQNPolicyConfig(seed=0, hidden=()))
    for policy in (ppo, dqn):
        assert isinstance(policy.model.encoder, CNN)
        actions, _ = policy.compute_actions(obs)
        assert actions.shape == (6,) and actions.dtype == np.int64
    batch = SampleBatch(
        {
            "obs": obs,
            "actions": rng.integers(0, 3, 6),
            "rewards": np.ones(6, np.float32),
            "next_obs": obs[::-1].copy(),
            "terminateds": np.zeros(6, bool),
        }
    )
    info = dqn.learn_on_batch(batch)
    assert info["td_error"].shape == (6,) and info["grad_norm"] > 0


def test_the_gradient_norm_without_clipping_is_clip_grad_norms_and_moves_no_gradient():
    from hrl_tasks.policies.torch_utils import gradient_norm

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 2))
    net[0].bias.requires_grad_(False)  # a parameter without a gradient is left out
    net(torch.randn(16, 5)).pow(2).sum().backward()
    with_grads = [p for p in net.parameters() if p.grad is not None]
    before = [p.grad.clone() for p in with_grads]
    norm = gradient_norm(list(net.parameters()))
    assert all(torch.equal(a, p.grad) for a, p in zip(before, with_grads, strict=True))
    expected = torch.nn.utils.clip_grad_norm_(net.parameters(), float("inf"))
    assert torch.allclose(norm, expected)
    assert gradient_norm([torch.zeros(3, requires_grad=True)]).item() == 0.0
