"""Multi-agent training: a shared PPO policy, PPO and DQN composed, acting after load."""

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

import hrl_tasks
from hrl_tasks.algorithms import DQN, PPO
from hrl_tasks.algorithms.composition import Composition
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.self_play import MAIN, SelfPlay
from hrl_tasks.policies.policy_map import PolicyMap, PolicySpec
from hrl_tasks.rollout.multi_agent_worker import Episode
from tests.multiagent.envs import race

pytestmark = pytest.mark.cluster

SMALL = {"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 16, "seed": 0}
PPO_KEYS = {"train_batch_size": 128, "minibatch_size": 64, "num_sgd_iter": 2}
DQN_KEYS = {"learning_starts": 64, "train_steps_per_round": 4, "hidden": (32, 32)}


def first_ppo_second_dqn(agent_id, episode):
    return "ppo" if agent_id == "player_1" else "dqn"


def to_x(agent_id, episode):
    return "x"


def composition_config(**extra):
    return {
        **SMALL,
        "env": "tictactoe_v3",
        "min_steps_per_report": 200,
        "policies": {"ppo": PolicySpec("ppo", PPO_KEYS), "dqn": PolicySpec("dqn", DQN_KEYS)},
        "policy_mapping_fn": first_ppo_second_dqn,
        **extra,
    }


def a_position():
    """Tic-tac-toe after three moves, as PettingZoo shows it to the player to move."""
    env = tictactoe_v3.env()
    env.reset(seed=0)
    for action in (4, 0, 8):
        env.step(action)
    observation, *_ = env.last()
    return observation


def test_one_ppo_policy_shared_by_both_players_learns_a_game(engine):
    algo = PPO({**SMALL, **PPO_KEYS, "env": "tictactoe_v3"}, engine=engine)
    try:
        assert isinstance(algo.policy, PolicyMap) and algo.policy.shared_policy == "default_policy"
        results = [algo.train() for _ in range(3)]
        last = results[-1]
        assert last["env_steps_sampled"] >= 3 * PPO_KEYS["train_batch_size"]
        assert "default_policy/total" in last["info"]
        assert last["episode_return_mean"] == 0.0  # the sum over both players of a zero-sum game
        assert "policy_return_mean/default_policy" in last
        observation = a_position()
        for _ in range(10):
            action = algo.compute_single_action(observation, explore=True)
            assert observation["action_mask"][action] == 1
    finally:
        algo.stop()


def test_ppo_and_dqn_learn_together_from_the_same_rollouts(engine, tmp_path):
    algo = Composition(composition_config(), engine=engine)
    try:
        weights = algo.policy.get_weights()
        results = [algo.train() for _ in range(3)]
        info = results[-1]["info"]
        assert "ppo/total" in info and "dqn/loss_td" in info and "dqn/epsilon" in info
        for pid in ("ppo", "dqn"):
            assert f"policy_return_mean/{pid}" in results[-1]
            changed = algo.policy[pid].get_weights()
            assert any(not np.array_equal(v, changed[k]) for k, v in weights[pid].items())
        path = algo.save(tmp_path / "checkpoint.hrl")
    finally:
        algo.stop()
    loaded = hrl_tasks.load(path)  # no cluster: acting only
    observation = a_position()
    for pid in ("ppo", "dqn"):
        action = loaded.compute_single_action(observation, policy_id=pid)
        assert observation["action_mask"][action] == 1
        saved, restored = algo.policy[pid].get_weights(), loaded.policy[pid].get_weights()
        for name, value in saved.items():
            np.testing.assert_array_equal(restored[name], value)
    with pytest.raises(ValueError, match="name the policy to act with"):
        loaded.compute_single_action(observation)
    with pytest.raises(ConfigError, match="need a policy_mapping_fn"):  # code is not saved
        hrl_tasks.load(path, engine=engine)
    resumed = hrl_tasks.load(
        path, engine=engine, config={"policy_mapping_fn": first_ppo_second_dqn}
    )
    try:
        assert resumed.iteration == 3 and resumed.train()["iteration"] == 4
    finally:
        resumed.stop()


def test_dqn_alone_trains_several_policies_with_a_replay_buffer_each(engine):
    config = {**SMALL, **DQN_KEYS, "env": race, "min_steps_per_report": 100,
              "policies": {"even": None, "odd": {"config": {"lr": 1e-3}}},
              "policy_mapping_fn": lambda agent, episode: "odd" if agent.endswith("1") else "even"}  # fmt: skip
    algo = DQN(config, engine=engine)
    try:
        assert algo.policy["odd"].config.lr == 1e-3 and algo.policy["even"].config.lr == 5e-4
        result = [algo.train() for _ in range(3)][-1]
        assert {"even/loss_td", "odd/loss_td"} <= set(result["info"])
        assert result["episode_len_mean"] == 4.0  # race: the last runner needs 4 steps
    finally:
        algo.stop()


def test_multi_agent_configs_that_cannot_work_fail_before_any_cluster_starts():
    two = {"a": PolicySpec(), "b": PolicySpec()}
    with pytest.raises(ConfigError, match="need a policy_mapping_fn"):
        PPO({"env": "tictactoe_v3", "policies": two})
    with pytest.raises(ConfigError, match="policies are for multi-agent envs"):
        PPO({"env": "CartPole-v1", "policies": two})
    with pytest.raises(ConfigError, match="composition needs policies"):
        Composition({"env": "tictactoe_v3"})
    with pytest.raises(ConfigError, match="unknown algorithm 'r2d2'"):
        Composition(composition_config(policies={"x": PolicySpec("r2d2")}, policy_mapping_fn=to_x))
    with pytest.raises(ConfigError, match="no key 'buffer_sise' .*did you mean 'buffer_size'"):
        Composition(
            composition_config(policies={"x": PolicySpec("dqn", {"buffer_sise": 10})},
                               policy_mapping_fn=to_x)
        )  # fmt: skip
    with pytest.raises(ConfigError, match=r"policies_to_train must name .* got \['c'\]"):
        PPO({"env": "tictactoe_v3", "policies": two, "policies_to_train": ["c"]})
    with pytest.raises(ConfigError, match="returned 'c', which is not among the policies"):
        PPO({"env": "tictactoe_v3", "policies": two, "policy_mapping_fn": lambda a, e: "c"})
    with pytest.raises(ConfigError, match="agent is 'nobody', not one of the env's agents"):
        PPO({"env": "tictactoe_v3", "policies": {"a": PolicySpec(agent="nobody")}})


def test_a_run_whose_config_holds_code_saves_without_it_and_policies_start_apart(tmp_path):
    config = {**SMALL, **PPO_KEYS, "num_workers": 0, "env": "tictactoe_v3",
              "policy_mapping_fn": lambda agent, episode: "default_policy",
              "on_train_result": lambda algo, result: None}  # fmt: skip
    algo = PPO(config, engine=hrl_tasks.SyncEngine())
    try:
        algo.save(tmp_path / "checkpoint.hrl")  # the functions stay out of the file
    finally:
        algo.stop()
    two = PPO({**config, "policies": {"x": None, "y": None},
               "policy_mapping_fn": lambda agent, episode: "x" if agent == "player_1" else "y"},
              engine=hrl_tasks.SyncEngine())  # fmt: skip
    try:
        x, y = two.policy["x"].get_weights(), two.policy["y"].get_weights()
        assert any(not np.array_equal(x[k], y[k]) for k in x)  # each its own seed
    finally:
        two.stop()


def test_ppo_with_a_dqn_policy_trains_it_in_a_replay_sub_flow(engine):
    config = {**SMALL, **PPO_KEYS, "env": "tictactoe_v3", "policy_mapping_fn": first_ppo_second_dqn,
              "policies": {"ppo": None, "dqn": PolicySpec("dqn", DQN_KEYS)}}  # fmt: skip
    algo = PPO(config, engine=engine)
    try:
        info = [algo.train() for _ in range(8)][-1]["info"]  # an iteration: a rollout round
        assert "dqn/epsilon" in info and "dqn/loss_td" in info and "ppo/total" in info
    finally:
        algo.stop()


def test_self_play_puts_the_learner_in_one_seat_and_snapshots_it_on_schedule(engine):
    league = SelfPlay(("player_0", "player_1"), snapshots=2, snapshot_every=2, self_play=0.0)
    for eps_id in range(6):  # the main policy alternates seats; the other is a snapshot
        episode = Episode(id=eps_id, worker_index=1)
        seats = [league(agent, episode) for agent in ("player_0", "player_1")]
        assert seats[eps_id % 2] == MAIN and seats[1 - eps_id % 2].startswith("snapshot_")
        assert seats == [league(agent, episode) for agent in ("player_0", "player_1")]
    config = {**SMALL, **PPO_KEYS, "env": "connect_four_v3", **league.config()}
    algo = PPO(config, engine=engine)
    try:
        first = algo.train()
        assert first["league/snapshots_taken"] == 0
        assert set(first["info"]) == {k for k in first["info"] if k.startswith("main/")}
        second = algo.train()
        assert second["league/snapshots_taken"] == 1
        main_weights = algo.policy[MAIN].get_weights()
        for name, value in algo.policy["snapshot_0"].get_weights().items():
            np.testing.assert_array_equal(value, main_weights[name])
        third = algo.train()  # main learns on; its snapshot stays as it was
        assert any(
            not np.array_equal(v, algo.policy[MAIN].get_weights()[k])
            for k, v in algo.policy["snapshot_0"].get_weights().items()
        )
        assert {"policy_return_mean/main"} <= set(third)
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="two agents"):
        SelfPlay(("a", "b", "c"))
