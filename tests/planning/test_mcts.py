"""Tree search: PUCT and UCT, batched leaves, and the same search split into tasks."""

import math

import numpy as np
import pytest

import hrl_tasks
from hrl_tasks.planning.evaluator import NetworkLeaves, RolloutLeaves
from hrl_tasks.planning.games import ConnectFour, TicTacToe
from hrl_tasks.planning.mcts import (
    RolloutEvaluator,
    SearchConfig,
    masked_softmax,
    search,
    select_action,
    uct_player,
)
from hrl_tasks.planning.opponents import MinimaxPlayer, RandomPlayer, play_match
from hrl_tasks.planning.parallel import ParallelConfig, allocate, parallel_search
from hrl_tasks.policies.policy_value import PolicyValueSpec


def play(game, moves):
    state = game.initial_state()
    for move in moves:
        state = game.step(state, move)
    return state


def rollout_search(game, state, simulations, seed=0, **kw):
    rng = np.random.default_rng(seed)
    config = SearchConfig(simulations=simulations, **kw)
    return search(game, state, RolloutEvaluator(game, rng), config, rng, root_noise=False)


@pytest.mark.parametrize("rule", ["uct", "puct"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_the_search_takes_a_win_in_one_and_blocks_a_loss_in_one(rule, batch_size):
    game = ConnectFour()
    win = play(game, [3, 0, 3, 0, 3, 1])  # player 0 to move; column 3 wins
    result = rollout_search(game, win, 400, rule=rule, batch_size=batch_size)
    assert int(np.argmax(result.visits)) == 3
    block = play(game, [3, 0, 3, 0, 3])  # player 1 to move; must block column 3
    result = rollout_search(game, block, 800, rule=rule, batch_size=batch_size)
    assert int(np.argmax(result.visits)) == 3


def test_every_simulation_is_counted_once_and_virtual_losses_leave_nothing_behind():
    game = TicTacToe()
    result = rollout_search(game, game.initial_state(), 300, batch_size=8)
    assert result.simulations == 300
    assert result.visits.sum() == 299  # the root's own evaluation is no edge
    assert np.all(result.visits == np.round(result.visits))
    # the root mover's edge values and the sum over all simulations agree
    root_value = result.value_vector_sum[result.to_play] - result.value_sums.sum()
    assert -1 <= root_value <= 1
    assert 8 in result.batch_sizes and max(result.batch_sizes) <= 8


def test_the_same_seed_gives_the_same_search():
    game = ConnectFour()
    a = rollout_search(game, game.initial_state(), 200, seed=5, batch_size=4)
    b = rollout_search(game, game.initial_state(), 200, seed=5, batch_size=4)
    c = rollout_search(game, game.initial_state(), 200, seed=6, batch_size=4)
    np.testing.assert_array_equal(a.visits, b.visits)
    assert not np.array_equal(a.visits, c.visits)


def test_a_terminal_root_returns_its_outcome():
    game = TicTacToe()
    over = play(game, [0, 3, 1, 4, 2])
    result = rollout_search(game, over, 10)
    assert result.visits.sum() == 0
    np.testing.assert_array_equal(result.value_vector_sum, [10, -10])


def test_uct_never_loses_to_random_and_draws_against_perfect_play():
    game = TicTacToe()
    rng = np.random.default_rng(1)
    against_random = play_match(game, uct_player(300), RandomPlayer(), 20, rng)
    assert against_random["losses"] == 0 and against_random["win_rate"] >= 0.8
    against_minimax = play_match(game, uct_player(1500), MinimaxPlayer(), 4, rng)
    assert against_minimax["losses"] == 0


def test_temperature_zero_takes_the_most_visited_and_one_draws_in_proportion():
    rng = np.random.default_rng(0)
    visits = np.array([0.0, 10.0, 30.0, 0.0])
    assert select_action(visits, 0.0, rng) == 2
    draws = [select_action(visits, 1.0, rng) for _ in range(2000)]
    assert set(draws) == {1, 2}
    assert 0.7 < np.mean(np.array(draws) == 2) < 0.8


def test_masked_softmax_gives_illegal_actions_nothing():
    probabilities = masked_softmax(np.array([[5.0, 1.0, 1.0]]), np.array([[False, True, True]]))
    np.testing.assert_allclose(probabilities, [[0.0, 0.5, 0.5]])


def test_allocation_follows_puct_with_the_warm_up_values_held():
    game = ConnectFour()
    warm = rollout_search(game, game.initial_state(), 50)
    shares = allocate(warm, 700, SearchConfig())
    assert shares.sum() == 700
    assert (
        int(np.argmax(shares)) == int(np.argmax(warm.q + 0.0 * warm.visits)) or shares.max() > 100
    )


def allocate_by_definition(warm, budget, config):
    """PUCT's choices one after another with the warm-up values held, in numpy."""
    visits, q = warm.visits.astype(float).copy(), warm.q
    if warm.bounds is not None:
        q = warm.bounds.normalize(q)
    shares = np.zeros(len(visits), dtype=int)
    for _ in range(budget):
        total = visits.sum()
        if config.rule == "uct":
            score = q + config.c_uct * np.sqrt(math.log(max(total, 1.0)) / np.maximum(visits, 1e-9))
        else:
            score = q + config.c_puct * warm.prior * np.sqrt(max(total, 1.0)) / (1.0 + visits)
        action = int(np.argmax(np.where(warm.legal, score, -np.inf)))
        visits[action] += 1
        shares[action] += 1
    return shares


@pytest.mark.parametrize("rule", ["puct", "uct"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_allocation_makes_the_choices_of_its_definition(rule, seed):
    game = ConnectFour()
    state = game.initial_state()
    for action in np.random.default_rng(seed).integers(0, 7, size=6):
        if not game.is_terminal(state) and game.legal_mask(state)[action]:
            state = game.step(state, int(action))
    warm = rollout_search(game, state, 40, seed=seed)
    config = SearchConfig(rule=rule)
    np.testing.assert_array_equal(
        allocate(warm, 375, config), allocate_by_definition(warm, 375, config)
    )


# --- split into tasks ---------------------------------------------------------------


@pytest.mark.parametrize("mode, trees", [("subtree", 1), ("root", 3)])
def test_a_split_search_on_the_in_process_engine_is_reproducible_and_counts_every_simulation(
    mode, trees
):
    game = ConnectFour()
    config = SearchConfig(simulations=600, batch_size=4)
    parallel = ParallelConfig(mode=mode, split_min=100, max_depth=2, trees=trees)
    with hrl_tasks.SyncEngine() as engine:
        a = parallel_search(game, game.initial_state(), RolloutLeaves(), config, parallel, 7,
                            engine=engine)  # fmt: skip
        b = parallel_search(game, game.initial_state(), RolloutLeaves(), config, parallel, 7,
                            engine=engine)  # fmt: skip
    np.testing.assert_array_equal(a.visits, b.visits)
    assert a.simulations == 600
    roots = 1 if mode == "subtree" else trees
    assert a.visits.sum() == 600 - roots


def test_a_split_search_with_a_network_in_each_process():
    game = TicTacToe()
    spec = PolicyValueSpec(game.observation_shape, game.num_actions, channels=8, blocks=1)
    weights = spec.build().get_weights()
    config = SearchConfig(simulations=200, batch_size=8)
    leaves = NetworkLeaves(spec, version=1)
    with hrl_tasks.SyncEngine() as engine:
        result = parallel_search(game, game.initial_state(), leaves, config,
                                 ParallelConfig(split_min=50), 0, weights, engine=engine)  # fmt: skip
        stats = leaves.evaluator().stats()
    assert result.simulations == 200
    assert sum(rows * n for rows, n in stats["rows"].items()) == 200


KILL_AFTER_S = 1.5


def test_a_split_search_finishes_with_a_legal_move_when_a_worker_is_killed(tmp_path):
    """Sub-tree tasks on a real cluster; one worker process is killed mid-search."""
    import os
    import signal
    import threading
    import time

    game = ConnectFour()
    state = play(game, [3, 3, 2])
    config = SearchConfig(simulations=20000, rule="uct", batch_size=1)
    parallel = ParallelConfig(split_min=500, max_depth=2)
    with hrl_tasks.Engine.local(n_workers=2, threads_per_worker=1) as engine:
        pids = list(engine.client.run(os.getpid).values())

        def kill_one():
            threading.Event().wait(KILL_AFTER_S)  # the sub-tree tasks run by then
            os.kill(pids[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_one)
        killer.start()
        start = time.perf_counter()
        result = parallel_search(game, state, RolloutLeaves(), config, parallel, 3, engine=engine)
        took = time.perf_counter() - start
        killer.join()
        stats = engine.stats()
    assert took > KILL_AFTER_S, "the search ended before the kill: make it longer"
    # The killed process may have been running the root's sub-trees or those a
    # nested engine submitted (whose retries that engine counts), so the root
    # engine is asked only whether it saw the loss.
    assert stats["workers_lost"] >= 1
    action = select_action(result.visits, 0.0, np.random.default_rng(0))
    assert game.legal_mask(state)[action]
    assert result.simulations == 20000


@pytest.mark.parametrize("mode", ["subtree", "root"])
def test_split_and_serial_searches_agree_where_the_move_is_clear(mode):
    game = ConnectFour()
    block = play(game, [3, 0, 3, 0, 3])  # player 1 must block column 3
    config = SearchConfig(simulations=1200, rule="uct", batch_size=1)
    parallel = ParallelConfig(mode=mode, split_min=200, max_depth=2, trees=3)
    serial = rollout_search(game, block, 1200, rule="uct", batch_size=1)
    with hrl_tasks.SyncEngine() as engine:
        split = parallel_search(game, block, RolloutLeaves(), config, parallel, 0, engine=engine)
    assert int(np.argmax(serial.visits)) == int(np.argmax(split.visits)) == 3
    assert split.q[3] > -0.5  # the block holds; the other moves lose at once
