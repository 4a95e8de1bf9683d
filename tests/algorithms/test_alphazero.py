"""AlphaZero on tic-tac-toe: it learns to never lose to perfect play, and a loaded
checkpoint plays PettingZoo's own env with no cluster."""

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.algorithms import AlphaZero, load
from hrl_tasks.planning.games import TicTacToe
from hrl_tasks.planning.opponents import MinimaxPlayer, play_match

pytestmark = pytest.mark.cluster

pettingzoo = pytest.importorskip("pettingzoo.classic")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """AlphaZero trained on tic-tac-toe until an evaluation shows no loss to minimax
    and nine wins in ten against random (a short version of bench/learning.py's run)."""
    path = tmp_path_factory.mktemp("az") / "az.hrl"
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        algo = AlphaZero(
            {"env": "tictactoe_v3", "seed": 1, "evaluation_interval": 2}, engine=engine
        )
        try:
            history = []
            for _ in range(40):
                result = algo.train()
                history.append(result)
                if result.get("loss_rate/minimax") == 0 and result.get("win_rate/random", 0) >= 0.9:
                    break
            algo.save(path)
        finally:
            algo.stop()
    return path, history


@pytest.mark.timeout(300)
def test_it_learns_to_draw_perfect_play(trained):
    path, history = trained
    last = history[-1]
    assert last["loss_rate/minimax"] == 0 and last["win_rate/random"] >= 0.9, history[-1]
    assert last["games"] == 8 * len(history) and last["updates"] > 0
    # and again, outside the training loop: 50 games against minimax, both sides
    algo = load(path)
    game = TicTacToe()
    agent = AgentPlayer(algo, game)
    outcome = play_match(game, agent, MinimaxPlayer(), 50, np.random.default_rng(0))
    assert outcome["losses"] <= 2, outcome  # the CI run is short; bench/learning.py asks 0


class AgentPlayer:
    """A loaded algorithm as a player: PettingZoo-style observations in, actions out."""

    name = "alphazero"

    def __init__(self, algo, game):
        self.algo, self.game = algo, game

    def act(self, game, state, rng):
        observation = {"observation": game.observation(state),
                       "action_mask": game.legal_mask(state).astype(np.int8)}  # fmt: skip
        return self.algo.compute_single_action(observation)


@pytest.mark.timeout(300)
def test_a_loaded_agent_plays_pettingzoos_env_with_legal_moves_and_no_cluster(trained):
    path, _ = trained
    algo = hrl_tasks.load(path)
    assert algo.acting_only and algo.engine is None
    rng = np.random.default_rng(0)
    for agent_index in (0, 1):
        env = pettingzoo.tictactoe_v3.env()
        env.reset(seed=agent_index)
        outcome = None
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                if env.possible_agents.index(agent) == agent_index:
                    outcome = reward
                env.step(None)
                continue
            if env.possible_agents.index(agent) == agent_index:
                action = algo.compute_single_action(observation)
                assert observation["action_mask"][action] == 1
            else:
                action = int(rng.choice(np.flatnonzero(observation["action_mask"])))
            env.step(action)
        assert outcome is not None and outcome >= 0  # random never beats it


def test_the_checkpoint_restores_network_optimizer_and_counters(trained):
    path, history = trained
    with hrl_tasks.SyncEngine() as engine:
        algo = load(path, engine=engine)
        try:
            state = algo.get_state()
            assert algo.iteration == len(history)
            assert state["flow"]["counters"]["games"] == history[-1]["games"]
            assert state["policy"]["optimizer"]["state"]
        finally:
            algo.stop()


def test_each_game_has_opponents_that_can_finish_and_minimax_is_refused_where_it_cannot():
    from hrl_tasks.algorithms import AlphaZeroConfig, ConfigError
    from hrl_tasks.planning.games import ConnectFour

    assert AlphaZeroConfig().evaluation_opponents(TicTacToe()) == ("random", "minimax")
    assert AlphaZeroConfig().evaluation_opponents(ConnectFour()) == ("random", "alphabeta-2")
    with pytest.raises(ConfigError, match="opponent 'minimax' solves the whole game tree") as bad:
        AlphaZeroConfig.from_dict({"env": "connect_four_v3", "opponents": ["random", "minimax"]})
    assert "\n" not in str(bad.value) and "alphabeta-N or uct-N" in str(bad.value)
    AlphaZeroConfig.from_dict({"env": "tictactoe_v3", "opponents": ["minimax"]})  # fine there


def test_an_evaluation_game_past_its_time_gives_up_at_its_next_move():
    from hrl_tasks.algorithms.alphazero.selfplay import evaluation_game
    from hrl_tasks.planning.evaluator import NetworkLeaves
    from hrl_tasks.planning.mcts import SearchConfig
    from hrl_tasks.policies.policy_value import PolicyValueSpec

    game, config = TicTacToe(), SearchConfig(simulations=4)
    spec = PolicyValueSpec(game.observation_shape, game.num_actions, channels=8, blocks=1)
    leaves, weights = NetworkLeaves(spec, version=1), spec.build().get_weights()
    with hrl_tasks.SyncEngine():
        late = evaluation_game(game, leaves, weights, config, "random", 1, 0, 0.0)
        outcome = evaluation_game(game, leaves, weights, config, "random", 1, 0, 60.0)
    assert late is None
    assert outcome in (-1.0, 0.0, 1.0)


def test_a_gumbel_self_play_game_learns_from_the_improved_policy_and_moves_by_the_search():
    from hrl_tasks.algorithms.alphazero.selfplay import self_play_game
    from hrl_tasks.planning.evaluator import NetworkLeaves
    from hrl_tasks.planning.mcts import SearchConfig
    from hrl_tasks.policies.policy_value import PolicyValueSpec

    game, config = TicTacToe(), SearchConfig(simulations=8, rule="gumbel", batch_size=4)
    spec = PolicyValueSpec(game.observation_shape, game.num_actions, channels=8, blocks=1)
    leaves, weights = NetworkLeaves(spec, version=1), spec.build().get_weights()
    with hrl_tasks.SyncEngine():
        record = self_play_game(game, leaves, weights, config, None, 4, seed=0)
    policy, mask = record["policy"], record["mask"]
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-5)
    assert (policy[~mask] == 0).all()
    # the improved policy, not visit counts: 7 simulations over up to 9 actions would
    # leave most entries 0 and the rest multiples of 1/7
    assert (policy[mask] > 0).all()
    assert record["simulations"] == 8 * record["moves"]


def test_gumbel_is_refused_with_split_searches_and_an_unknown_rule_is_named():
    from hrl_tasks.algorithms import AlphaZeroConfig, ConfigError

    with pytest.raises(ConfigError, match="split_min must be 0") as bad:
        AlphaZeroConfig.from_dict({"search_rule": "gumbel", "split_min": 400})
    assert "\n" not in str(bad.value)
    with pytest.raises(ConfigError, match="'puct' or 'gumbel', got 'uct'"):
        AlphaZeroConfig.from_dict({"search_rule": "uct"})
    AlphaZeroConfig.from_dict({"search_rule": "gumbel", "simulations": 16})


def test_playout_cap_randomization_keeps_only_the_positions_searched_in_full():
    from hrl_tasks.algorithms.alphazero.selfplay import self_play_game
    from hrl_tasks.planning.evaluator import NetworkLeaves
    from hrl_tasks.planning.mcts import SearchConfig
    from hrl_tasks.policies.policy_value import PolicyValueSpec

    game = TicTacToe()
    full, fast = SearchConfig(simulations=24), SearchConfig(simulations=4, dirichlet_fraction=0)
    spec = PolicyValueSpec(game.observation_shape, game.num_actions, channels=8, blocks=1)
    leaves, weights = NetworkLeaves(spec, version=1), spec.build().get_weights()
    records = []
    with hrl_tasks.SyncEngine():
        for seed in range(6):
            records.append(self_play_game(game, leaves, weights, full, None, 4, seed, fast, 0.5))
    for record in records:
        kept = record["positions"]
        assert len(record["obs"]) == len(record["policy"]) == len(record["value"]) == kept
        assert record["simulations"] == 24 * kept + 4 * (record["moves"] - kept)
    kept = sum(r["positions"] for r in records)
    assert 0 < kept < sum(r["moves"] for r in records)


def test_the_learner_worker_takes_the_updates_and_the_checkpoint_holds_its_state(tmp_path):
    from hrl_tasks.algorithms import AlphaZeroConfig, ConfigError

    config = {"env": "tictactoe_v3", "seed": 3, "num_workers": 1, "num_learners": 1,
              "games_per_iteration": 4, "simulations": 16, "min_buffer_size": 16,
              "updates_per_iteration": 5, "channels": 8, "blocks": 1, "evaluation_interval": 0,
              "lr_schedule": [[0, 1e-2], [1000, 1e-3]]}  # fmt: skip
    algo = AlphaZero(config)  # its own cluster: one worker plays, one learns
    try:
        before = algo.net.get_weights()
        for _ in range(3):
            result = algo.train()
        assert result["updates"] == 15 and np.isfinite(result["info/policy_loss"])
        learned = algo.learners.handles[0].call("get_weights", direct=True).result()
        for name, value in algo.net.get_weights().items():  # the driver's copy caught up
            np.testing.assert_array_equal(value, learned[name])
        assert any(not np.array_equal(v, learned[k]) for k, v in before.items())
        learner_state = algo.learners.handles[0].call("get_policy_state", direct=True).result()
        assert 1e-3 < result["lr"] < 1e-2  # the schedule reached the learner worker
        assert learner_state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(result["lr"])
        path = algo.save(tmp_path / "az.hrl")
    finally:
        algo.stop()
    with hrl_tasks.SyncEngine() as engine:
        restored = load(path, engine=engine, config={"num_learners": 0})
        try:
            state = restored.get_state()
        finally:
            restored.stop()
    assert state["policy"]["optimizer"]["state"] and state["policy"]["num_grad_updates"] == 15
    with pytest.raises(ConfigError, match="num_learners must be 0 or 1") as many:
        AlphaZeroConfig.from_dict({"num_learners": 2})
    assert "\n" not in str(many.value)


def test_the_value_target_mixes_the_games_outcome_with_the_searchs_value():
    from hrl_tasks.algorithms import AlphaZeroConfig, ConfigError
    from hrl_tasks.algorithms.alphazero.plan import value_target
    from hrl_tasks.algorithms.alphazero.selfplay import self_play_game
    from hrl_tasks.planning.evaluator import RolloutLeaves
    from hrl_tasks.planning.mcts import SearchConfig

    game = TicTacToe()
    with hrl_tasks.SyncEngine():
        record = self_play_game(game, RolloutLeaves(), None, SearchConfig(simulations=50), None,
                                2, seed=4)  # fmt: skip
    z, q = record["value"], record["search_value"]
    assert len(q) == len(z) == record["positions"] == record["moves"]
    assert (np.abs(q) <= 1).all() and not np.allclose(q, z)  # a mean of rollouts, not z
    np.testing.assert_array_equal(value_target(record, 0.0), z)
    np.testing.assert_allclose(value_target(record, 1.0), q, rtol=1e-6)
    np.testing.assert_allclose(value_target(record, 0.25), 0.75 * z + 0.25 * q, rtol=1e-6)
    with pytest.raises(ConfigError, match="value_target_search must be in \\[0, 1\\]"):
        AlphaZeroConfig.from_dict({"value_target_search": 1.5})


def test_the_learning_rate_follows_its_schedule_over_self_play_moves():
    from hrl_tasks.algorithms import AlphaZeroConfig, ConfigError
    from hrl_tasks.algorithms.alphazero.plan import scheduled_lr

    schedule = ((0, 2e-3), (100, 2e-3), (300, 2e-4))
    assert scheduled_lr(None, 5e-3, 10_000) == 5e-3
    assert scheduled_lr(schedule, 5e-3, 50) == 2e-3
    assert scheduled_lr(schedule, 5e-3, 200) == pytest.approx(1.1e-3)
    assert scheduled_lr(schedule, 5e-3, 10_000) == pytest.approx(2e-4)  # held past the end
    assert AlphaZeroConfig.from_dict({"lr_schedule": [[0, 1e-3], [10, 1e-4]]}).lr_schedule == (
        (0.0, 1e-3), (10.0, 1e-4))  # fmt: skip
    for bad in ([], [[0, 1e-3, 5]], [[10, 1e-3], [5, 1e-4]], [[0, 0.0]], [[-1, 1e-3]],
                [[0, float("nan")]]):  # fmt: skip
        with pytest.raises(ConfigError, match="^AlphaZeroConfig.lr_schedule must") as e:
            AlphaZeroConfig.from_dict({"lr_schedule": bad})
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="lr_schedule"):
        AlphaZeroConfig.from_dict({"lr_schedule": "0.001"})

    config = {"env": "tictactoe_v3", "seed": 5, "games_per_iteration": 2, "simulations": 8,
              "min_buffer_size": 8, "updates_per_iteration": 2, "channels": 8, "blocks": 1,
              "evaluation_interval": 0, "lr_schedule": [[0, 1e-2], [40, 1e-3]]}  # fmt: skip
    with hrl_tasks.SyncEngine() as engine:
        algo = AlphaZero(config, engine=engine)  # learns in the driver
        try:
            rates = [algo.train()["lr"] for _ in range(4)]
            assert algo.learner.optimizer.param_groups[0]["lr"] == pytest.approx(rates[-1])
        finally:
            algo.stop()
    assert rates[0] > rates[-1] and rates[-1] == pytest.approx(1e-3)  # 4 games pass 40 moves
