"""SAC and TD3 policies: their losses by their properties, and learning a one-step task."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import (
    SACPolicy,
    SACPolicyConfig,
    TD3Policy,
    TD3PolicyConfig,
    UnsupportedSpaceError,
)
from hrl_tasks.policies.sac import squashed_sample
from tests.policies.synthetic import cartpole_spaces, pendulum_spaces

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTION = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def one_step_batch(policy, n=128, seed=0):
    """A task that ends after one step: the reward is highest for the action ``x =
    obs[0]`` clipped to [-1, 1] (Box), or for action 1 exactly when ``obs[0] > 0``
    (Discrete). Actions are uniform, as replay before learning starts holds."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    best = np.clip(obs[:, 0], -1, 1)
    if isinstance(policy.action_space, gym.spaces.Discrete):
        actions = rng.integers(0, 2, n)
        rewards = np.where(actions == (obs[:, 0] > 0), 1.0, 0.0)
    else:
        actions = rng.uniform(-2, 2, (n, 1)).astype(np.float32)
        rewards = -((actions[:, 0] - best) ** 2)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rewards.astype(np.float32),
            SampleBatch.NEXT_OBS: rng.normal(size=(n, 3)).astype(np.float32),
            SampleBatch.TERMINATEDS: np.ones(n, bool),
            SampleBatch.TRUNCATEDS: np.zeros(n, bool),
        }
    )


def train(policy, updates, seed=0):
    for i in range(updates):
        policy.learn_on_batch(one_step_batch(policy, seed=seed * 100_000 + i))
        if policy.target_due():
            policy.update_target()


def test_the_squashed_gaussian_log_probability_is_torchs():
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3) * 2, torch.randn(64, 3).clamp(-2, 1)
    noise = torch.randn(64, 3)
    actions, logp = squashed_sample(mean, log_std, noise)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(cache_size=1)],
    )
    u = mean + log_std.exp() * noise
    expected = dist.log_prob(torch.tanh(u)).sum(-1)
    inside = actions.abs().max(-1).values < 0.999  # where tanh's inverse is exact in float32
    torch.testing.assert_close(logp[inside], expected[inside], rtol=1e-4, atol=1e-4)
    assert torch.isfinite(squashed_sample(torch.full((1, 1), 30.0), torch.zeros(1, 1),
                                          torch.zeros(1, 1))[1]).all()  # fmt: skip


@pytest.mark.parametrize("make", [
    lambda: SACPolicy(OBS, ACTION, SACPolicyConfig(seed=0, hidden=(32,))),
    lambda: SACPolicy(OBS, gym.spaces.Discrete(2), SACPolicyConfig(seed=0, hidden=(32,))),
    lambda: TD3Policy(OBS, ACTION, TD3PolicyConfig(seed=0, hidden=(32,), policy_delay=1)),
], ids=["sac", "sac_discrete", "td3"])  # fmt: skip
def test_each_term_moves_only_its_own_parameters(make):
    policy = make()
    terms = policy.loss(one_step_batch(policy))
    own = {"loss_critic": "critic", "loss_actor": "actor", "loss_alpha": "log_alpha"}
    for term, part in own.items():
        if term not in terms:
            continue
        grads = torch.autograd.grad(terms[term], list(policy.model.parameters()),
                                    retain_graph=True, allow_unused=True)  # fmt: skip
        for (name, _), grad in zip(policy.model.named_parameters(), grads, strict=True):
            moved = grad is not None and bool(grad.abs().sum() > 0)
            assert moved == name.startswith(part), (term, name)


def test_sac_learns_the_best_action_of_a_one_step_task_and_lowers_its_temperature():
    policy = SACPolicy(OBS, ACTION, SACPolicyConfig(seed=0, hidden=(64, 64), lr=3e-3))
    train(policy, 400)
    test = one_step_batch(policy, 256, seed=99)
    actions, _ = policy.compute_actions(test["obs"], explore=False)
    best = np.clip(test["obs"][:, 0], -1, 1)
    assert np.mean(np.abs(actions[:, 0] - best)) < 0.25
    assert float(policy.alpha) < 0.5  # the entropy was far above -dim(A): alpha fell
    assert np.all(np.abs(actions) <= 2.0)


def test_discrete_sac_learns_which_action_pays():
    policy = SACPolicy(OBS, gym.spaces.Discrete(2), SACPolicyConfig(seed=0, hidden=(64,), lr=3e-3))
    train(policy, 300)
    test = one_step_batch(policy, 256, seed=99)
    actions, _ = policy.compute_actions(test["obs"], explore=False)
    assert np.mean(actions == (test["obs"][:, 0] > 0)) > 0.9
    explored, _ = policy.compute_actions(test["obs"], explore=True)
    assert 0 < np.mean(explored != actions) < 0.5  # it still explores, less than uniformly


def test_td3_learns_the_best_action_and_trains_its_actor_every_policy_delay_updates():
    policy = TD3Policy(OBS, ACTION, TD3PolicyConfig(seed=0, hidden=(64, 64), lr=3e-3))
    actor_before = [p.clone() for p in policy.model.actor.parameters()]

    def actor_unchanged():
        now = policy.model.actor.parameters()
        return all(torch.equal(a, b) for a, b in zip(actor_before, now, strict=True))

    targets_before = policy.num_target_updates
    policy.learn_on_batch(one_step_batch(policy))  # update 1 of 2: critics only
    assert actor_unchanged()
    assert not policy.target_due()
    policy.learn_on_batch(one_step_batch(policy, seed=1))  # update 2: the actor too
    assert not actor_unchanged()
    assert policy.target_due() and policy.num_target_updates == targets_before
    train(policy, 600)
    test = one_step_batch(policy, 256, seed=99)
    actions, _ = policy.compute_actions(test["obs"], explore=False)
    assert np.mean(np.abs(actions[:, 0] - np.clip(test["obs"][:, 0], -1, 1))) < 0.25


def test_td3_target_by_hand_without_smoothing_noise():
    policy = TD3Policy(*pendulum_spaces(), TD3PolicyConfig(seed=0, hidden=(16,), target_noise=0.0))
    rng = np.random.default_rng(0)
    n = 16
    batch = SampleBatch({
        "obs": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
        "terminateds": np.arange(n) % 4 == 0,
        "truncateds": np.zeros(n, bool),
    })  # fmt: skip
    policy.learn_on_batch(batch)
    policy.learn_on_batch(batch)
    policy.update_target(0.5)  # target and online networks now differ
    with torch.no_grad():
        next_obs = torch.from_numpy(batch["next_obs"])
        next_q = torch.min(
            *policy.target_model.critic(next_obs, policy.target_model.actor(next_obs))
        )
        target = batch["rewards"] + 0.99 * ~batch["terminateds"] * next_q.numpy()
        unit = torch.from_numpy(batch["actions"]) / 2.0  # [-2, 2] to [-1, 1]
        q1 = policy.model.critic(torch.from_numpy(batch["obs"]), unit)[0].numpy()
    np.testing.assert_allclose(policy.loss(batch)["td_error"].numpy(), q1 - target, rtol=1e-5,
                               atol=1e-5)  # fmt: skip


def test_uniform_actions_span_the_action_space_until_turned_off():
    policy = SACPolicy(*pendulum_spaces(), SACPolicyConfig(seed=0, hidden=(16,)))
    obs = np.zeros((2000, 3), np.float32)
    policy.set_uniform_actions(True)
    actions, _ = policy.compute_actions(obs)
    assert actions.min() < -1.9 and actions.max() > 1.9 and np.all(np.abs(actions) <= 2.0)
    greedy, _ = policy.compute_actions(obs[:4], explore=False)
    assert np.ptp(greedy) == 0  # acting greedily ignores the flag
    policy.set_uniform_actions(False)
    actions, _ = policy.compute_actions(obs)
    assert actions.std() < 1.5  # the untrained actor: centred, not uniform over [-2, 2]
    state = policy.get_state()
    policy.set_uniform_actions(True)
    policy.set_state(state)
    assert policy.uniform_actions is False


def test_spaces_they_cannot_act_in_are_named():
    with pytest.raises(UnsupportedSpaceError, match="TD3 needs a 1-D Box with finite bounds"):
        TD3Policy(*cartpole_spaces(), TD3PolicyConfig(seed=0))
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(UnsupportedSpaceError, match="SAC needs a 1-D Box .* or Discrete"):
        SACPolicy(OBS, unbounded, SACPolicyConfig(seed=0))


def test_default_target_entropies():
    assert SACPolicy(OBS, ACTION, SACPolicyConfig(seed=0)).target_entropy == -1.0
    discrete = SACPolicy(OBS, gym.spaces.Discrete(4), SACPolicyConfig(seed=0))
    assert discrete.target_entropy == pytest.approx(0.89 * math.log(4))
    assert (
        SACPolicy(OBS, ACTION, SACPolicyConfig(seed=0, target_entropy=-3.0)).target_entropy == -3.0
    )


@pytest.mark.parametrize(
    "cls, config", [(SACPolicy, SACPolicyConfig), (TD3Policy, TD3PolicyConfig)]
)
def test_normalized_observations_are_what_the_networks_read_and_travel_with_the_weights(
    cls, config
):
    from hrl_tasks.data.running_stats import RunningStats

    normalized = cls(OBS, ACTION, config(seed=0, hidden=(16,), normalize_observations=True))
    plain = cls(OBS, ACTION, config(seed=0, hidden=(16,)))
    assert normalized.normalizes_observations and not plain.normalizes_observations
    rng = np.random.default_rng(0)
    seen = [rng.normal(5.0, 3.0, size=(n, 3)) for n in (40, 60)]  # two workers' samples
    for rows in seen:
        normalized.update_observation_stats(RunningStats.of(rows, (3,)))
    everything = np.concatenate(seen)
    weights = normalized.get_weights()
    np.testing.assert_allclose(weights["obs_normalizer.mean"], everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(weights["obs_normalizer.var"], everything.var(0), rtol=1e-5)
    plain.set_weights({k: v for k, v in weights.items() if not k.startswith("obs_normalizer")})
    obs = rng.normal(5.0, 3.0, size=(8, 3)).astype(np.float32)
    scaled = ((obs - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-8)).astype(np.float32)
    np.testing.assert_allclose(normalized.compute_actions(obs, explore=False)[0],
                               plain.compute_actions(scaled, explore=False)[0], atol=1e-5)  # fmt: skip
    copy = cls(OBS, ACTION, config(seed=1, hidden=(16,), normalize_observations=True))
    copy.set_state(normalized.get_state())  # checkpoints keep the statistics
    np.testing.assert_array_equal(copy.get_weights()["obs_normalizer.count"], 100.0)
    with pytest.raises(NotImplementedError, match="does not normalize"):
        plain.update_observation_stats(RunningStats.of(obs, (3,)))
