"""The multi-agent rollout worker: each agent's own trajectory, whole episodes, metrics."""

import numpy as np

from hrl_tasks.data import MultiAgentBatch
from hrl_tasks.envs.multi_agent import make_multi_agent_env
from hrl_tasks.policies.pg import PGPolicy, PGPolicyConfig
from hrl_tasks.policies.policy_map import PolicyMap, policy_observation_space
from hrl_tasks.policies.ppo import PPOPolicy, PPOPolicyConfig
from hrl_tasks.rollout.multi_agent_worker import MultiAgentRolloutWorker
from tests.multiagent.envs import EndTogether, race


def where(batch, mask):
    """The rows of ``batch`` where ``mask`` holds."""
    return {name: column[mask] for name, column in batch.items()}


def shared_policy(env_spec, policy_class=PPOPolicy, config=None):
    env = make_multi_agent_env(env_spec)
    agent = env.possible_agents[0]
    space = policy_observation_space(env.observation_space(agent))
    policy = policy_class(space, env.action_space(agent), config or PPOPolicyConfig(seed=0))
    return PolicyMap({"shared": policy})


def test_a_turn_based_game_gives_each_player_its_own_trajectory():
    worker = MultiAgentRolloutWorker("tictactoe_v3", shared_policy("tictactoe_v3"), num_envs=3,
                                     rollout_fragment_length=30, seed=0)  # fmt: skip
    batch, metrics = worker.sample()
    assert isinstance(batch, MultiAgentBatch) and set(batch) == {"shared"}
    rows = batch["shared"]
    assert batch.env_steps() == sum(metrics["episode_lengths"]) >= 90
    assert len(rows) == batch.env_steps()  # one row per move: each move is one agent's
    episodes = 0
    for eps_id in np.unique(rows["eps_id"]):
        game = where(rows, rows["eps_id"] == eps_id)
        ends = {}
        for agent in np.unique(game["agent_index"]):
            mine = where(game, game["agent_index"] == agent)
            np.testing.assert_array_equal(mine["t"], np.arange(len(mine["t"])))
            assert mine["terminateds"][-1] and not mine["terminateds"][:-1].any()
            assert (mine["rewards"][:-1] == 0).all()  # tic-tac-toe pays at the end only
            ends[int(agent)] = float(mine["rewards"][-1])
            # the next observation of a move is the board at the player's next turn
            np.testing.assert_array_equal(mine["next_obs"][:-1], mine["obs"][1:])
            # a mover's board has one more piece of its own and one more of the opponent's
            grown = mine["obs"][1:, :18].sum(axis=1) - mine["obs"][:-1, :18].sum(axis=1)
            assert (grown == 2).all()
        assert sorted(ends.values()) in ([-1.0, 1.0], [0.0, 0.0])
        episodes += 1
    assert episodes == len(metrics["episode_returns"])
    assert metrics["episode_returns"] == [0.0] * episodes  # zero-sum: the sum over agents
    assert len(metrics["policy_returns"]["shared"]) == 2 * episodes  # one per player


def test_agents_that_finish_early_end_their_trajectories_there():
    worker = MultiAgentRolloutWorker(race, shared_policy(race, PGPolicy, PGPolicyConfig(seed=0)),
                                     rollout_fragment_length=4, seed=0)  # fmt: skip
    batch, metrics = worker.sample()
    rows = batch["shared"]
    game = where(rows, rows["eps_id"] == rows["eps_id"][0])
    lengths = [int((game["agent_index"] == i).sum()) for i in range(3)]
    assert lengths == [2, 3, 4]  # runner_i steps i + 2 times
    assert metrics["episode_lengths"][0] == 4  # env steps: until the last one finished
    returns = [float(game["rewards"][game["agent_index"] == i].sum()) for i in range(3)]
    assert metrics["episode_returns"][0] == sum(returns)
    assert sorted(metrics["policy_returns"]["shared"][:3]) == sorted(returns)
    assert (game["next_values"][game["terminateds"]] == 0).all()


def test_sampling_is_reproducible_with_a_seed_and_episodes_carry_over():
    def run():
        worker = MultiAgentRolloutWorker("connect_four_v3", shared_policy("connect_four_v3"),
                                         num_envs=2, rollout_fragment_length=25, seed=3,
                                         worker_index=1)  # fmt: skip
        return [worker.sample()[0]["shared"] for _ in range(2)]

    first, second = run(), run()
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a["actions"], b["actions"])
        np.testing.assert_array_equal(a["eps_id"], b["eps_id"])
    ids = [set(np.unique(batch["eps_id"])) for batch in first]
    assert not ids[0] & ids[1]  # an episode is returned once, when it has ended
    assert min(ids[0]) >> 40 == 1  # the worker index is in the episode ids


def test_an_episode_that_ends_for_all_ends_every_agents_trajectory():
    worker = MultiAgentRolloutWorker(EndTogether, shared_policy(EndTogether), seed=0,
                                     rollout_fragment_length=3)  # fmt: skip
    rows = worker.sample()[0]["shared"]
    last = rows["t"] == 2
    assert last.sum() == 2 and rows["terminateds"][last].all()
    assert not rows["terminateds"][~last].any()
    assert (rows["next_values"][last] == 0).all()  # nothing is bootstrapped past the end
