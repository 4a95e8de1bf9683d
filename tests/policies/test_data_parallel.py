"""A learner group's update equals one learner's on the whole batch.

The learners here are threads of this process, each with its own gloo process
group over loopback TCP (what `Learner` does in a worker process); the tests of
`hrl_tasks.rollout.learner_group` run them as processes of a real cluster.
"""

import threading

import numpy as np
import psutil
import pytest

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies import (
    APPOPolicy,
    APPOPolicyConfig,
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
from hrl_tasks.policies.data_parallel import split_rows
from hrl_tasks.rollout.learner_group import Learner, combine_info
from tests.policies.synthetic import cartpole_spaces, fragment, pendulum_spaces

FRAGMENT = 12
CASES = {  # policy, and a batch of whole fragments (on-policy) or of replay rows
    "ppo": lambda: PPOPolicy(*cartpole_spaces(), PPOPolicyConfig(
        seed=1, minibatch_size=20, num_sgd_iter=3, target_kl=0.5)),
    "ppo_continuous": lambda: PPOPolicy(*pendulum_spaces(), PPOPolicyConfig(
        seed=1, minibatch_size=32, num_sgd_iter=2)),
    "a2c": lambda: PGPolicy(*cartpole_spaces(), PGPolicyConfig(seed=1, normalize_advantages=True)),
    "impala": lambda: IMPALAPolicy(*pendulum_spaces(), IMPALAPolicyConfig(
        seed=1, rollout_fragment_length=FRAGMENT)),
    "appo": lambda: APPOPolicy(*cartpole_spaces(), APPOPolicyConfig(
        seed=1, rollout_fragment_length=FRAGMENT, num_sgd_iter=2)),
    "sac": lambda: SACPolicy(*pendulum_spaces(), SACPolicyConfig(seed=1, hidden=(32, 32))),
    "sac_discrete": lambda: SACPolicy(*cartpole_spaces(), SACPolicyConfig(seed=1, hidden=(32,))),
    "td3": lambda: TD3Policy(*pendulum_spaces(), TD3PolicyConfig(seed=1, hidden=(32, 32),
                                                           policy_delay=1)),
}  # fmt: skip
REPLAY = ("sac", "sac_discrete", "td3")


def batch_for(name, policy):
    if name in REPLAY:  # n-step transitions of one fragment
        return policy.postprocess_trajectory(fragment(policy, 50))
    parts = [policy.postprocess_trajectory(fragment(policy, FRAGMENT, seed=s)) for s in range(5)]
    return SampleBatch.concat_samples(parts)


def group_update(make_policy, batch, world, steps=2):
    """``steps`` updates of a group of ``world`` learners (threads); returns the
    learners' weights and the combined info of the last update."""
    first = make_policy()
    state = first.get_state()
    learners = [Learner(type(first), first.observation_space, first.action_space,
                        first.config, state, num_threads=None) for _ in range(world)]  # fmt: skip
    port = learners[0].serve("127.0.0.1", world)
    run_all(learners, lambda rank, learner: learner.join("127.0.0.1", port, rank, world))
    unit = first.data_parallel_unit()
    shares = [slice(0, len(batch))] * world if unit is None else split_rows(len(batch), world, unit)
    for _ in range(steps):
        out = run_all(learners, lambda rank, learner: learner.learn(
            batch[shares[rank]], shares[rank], len(batch), [("update_target", ())]
            if hasattr(learner.policy, "update_target") else []))  # fmt: skip
    info = combine_info([o[0] for o in out], [s.stop - s.start for s in shares])
    for learner in learners:
        learner.leave()
    return [learner.get_weights() for learner in learners], info


def run_all(learners, fn):
    results, errors = [None] * len(learners), []

    def target(rank):
        try:
            results[rank] = fn(rank, learners[rank])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(r,)) for r in range(len(learners))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def single_update(make_policy, batch, steps=2):
    policy = make_policy()
    for _ in range(steps):
        if hasattr(policy, "update_target"):
            policy.update_target()
        info = policy.learn_on_batch(batch)
    return policy.get_weights(), info


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.timeout(120)
def test_two_learners_take_the_update_of_one(name):
    batch = batch_for(name, CASES[name]())
    alone, alone_info = single_update(CASES[name], batch)
    (first, second), info = group_update(CASES[name], batch, world=2)
    for key in alone:
        np.testing.assert_array_equal(first[key], second[key], err_msg=f"{key}: learners differ")
        np.testing.assert_allclose(first[key], alone[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert info.keys() == alone_info.keys()
    if "td_error" in info:  # per-row arrays come back in batch order
        np.testing.assert_allclose(info["td_error"], alone_info["td_error"], rtol=1e-4, atol=1e-4)


def test_three_learners_with_uneven_shares():
    batch = batch_for("sac", CASES["sac"]())  # 50 rows: 17, 17, 16
    alone, _ = single_update(CASES["sac"], batch)
    weights, _ = group_update(CASES["sac"], batch, world=3)
    for key in alone:
        np.testing.assert_allclose(weights[2][key], alone[key], rtol=1e-4, atol=1e-5)


def test_split_rows_cuts_whole_sequences_as_evenly_as_they_allow():
    assert split_rows(10, 3) == [slice(0, 4), slice(4, 7), slice(7, 10)]
    assert split_rows(60, 2, unit=12) == [slice(0, 36), slice(36, 60)]
    assert split_rows(2, 3, allow_empty=True) == [slice(0, 1), slice(1, 2), slice(2, 2)]
    with pytest.raises(ValueError, match="not whole sequences of 12 rows"):
        split_rows(50, 2, unit=12)
    with pytest.raises(ValueError, match="at least 3 rows or fewer learners"):
        split_rows(2, 3)


def test_combine_info_weights_scalars_by_rows_and_joins_arrays():
    infos = [
        {"loss": 1.0, "td_error": np.array([1.0, 2.0])},
        {"loss": 4.0, "td_error": np.array([3.0])},
    ]
    out = combine_info(infos, [2, 1])
    assert out["loss"] == pytest.approx(2.0)
    np.testing.assert_array_equal(out["td_error"], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("name", ["ppo", "sac", "td3"])
def test_a_learning_snapshot_puts_back_what_an_update_changed(name):
    policy = CASES[name]()
    batch = batch_for(name, CASES[name]())
    policy.learn_on_batch(batch)  # moments to keep
    before = policy.get_state()
    snapshot = policy.learning_snapshot()
    policy.learn_on_batch(batch)
    policy.restore_learning_snapshot(snapshot)
    after = policy.get_state()
    for key in before["weights"]:
        np.testing.assert_array_equal(after["weights"][key], before["weights"][key])
    np.testing.assert_array_equal(after["rng"], before["rng"])
    assert after["num_grad_updates"] == before["num_grad_updates"]
    again, twin = policy.learn_on_batch(batch), CASES[name]()
    twin.set_state(before)
    expected = twin.learn_on_batch(batch)  # the optimizer's moments were put back too
    assert again["total"] == pytest.approx(expected["total"])
    for key, value in twin.get_weights().items():
        np.testing.assert_array_equal(policy.get_weights()[key], value)


def listening() -> set[tuple[str, int]]:
    """The (host, port) of each TCP socket this process listens on."""
    connections = psutil.Process().net_connections("inet")
    return {(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}


def test_a_group_listens_on_the_address_given_only():
    """The store and each learner's gloo connections listen on the learners' address
    (a loopback address other than the hostname's here), not on every interface."""
    host = "127.0.0.2"
    first = CASES["ppo"]()
    spaces = (first.observation_space, first.action_space)
    learners = [Learner(type(first), *spaces, first.config, num_threads=None) for _ in range(2)]
    before = listening()
    port = learners[0].serve(host, 2)
    try:
        run_all(learners, lambda rank, learner: learner.join(host, port, rank, 2))
        opened = listening() - before
    finally:
        for learner in learners:
            learner.leave()
    assert len(opened) >= 3, opened  # the store, and a listener per learner
    assert {ip for ip, _ in opened} == {host}, opened
