"""Gumbel AlphaZero's search rule: sequential halving's schedule, its pick, and its
policy target, each checked against the paper's definitions written out here."""

import math
import zlib

import numpy as np
import pytest

from hrl_tasks.planning.games import ConnectFour, TicTacToe
from hrl_tasks.planning.gumbel import considered_visits
from hrl_tasks.planning.mcts import RolloutEvaluator, SearchConfig, search


def play(game, moves):
    state = game.initial_state()
    for move in moves:
        state = game.step(state, move)
    return state


def test_sequential_halving_gives_each_round_its_share_and_halves():
    # 4 actions, 16 simulations, log2(4) = 2 rounds' worth of shares:
    # round 1: 16 // (2 * 4) = 2 visits to each of 4; round 2: 16 // (2 * 2) = 4 to each of 2
    assert considered_visits(4, 16) == (0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5)
    # one action: every simulation goes to it
    assert considered_visits(1, 5) == (0, 1, 2, 3, 4)
    # 7 actions (Connect Four), 50 simulations: 50 // (3 * 7) = 2 visits each first
    sequence = considered_visits(7, 50)
    assert len(sequence) == 50 and sequence[:14] == (0,) * 7 + (1,) * 7
    assert sequence[14:20] == (2, 2, 2, 3, 3, 3)  # then 3 actions, 50 // 9 = 5 visits each


class FixedEvaluator:
    """Priors and values that depend only on the state: a deterministic stand-in for a
    network, so that a test can recompute the search's arithmetic from its result."""

    def __init__(self, game):
        self.game = game

    def __call__(self, states):
        priors, values = [], []
        for state in states:
            rng = np.random.default_rng(zlib.crc32(self.game.observation(state).tobytes()))
            priors.append(rng.dirichlet(np.ones(self.game.num_actions)))
            values.append(rng.uniform(-0.5, 0.5))
        return np.array(priors), np.array(values)


def improved_policy_by_definition(prior, visits, value_sums, root_value, mask, c_visit, c_scale):
    """softmax(log prior + sigma(completed Q)), written out as the paper and mctx define it."""
    legal = np.flatnonzero(mask)
    visited = [a for a in legal if visits[a] > 0]
    q = {a: value_sums[a] / visits[a] for a in visited}
    total = sum(visits[a] for a in visited)
    if total:
        weight = sum(prior[a] for a in visited)
        mix = sum(prior[a] * q[a] for a in visited) / weight
        v_mix = (root_value + total * mix) / (total + 1)
    else:
        v_mix = root_value
    completed = {a: q.get(a, v_mix) for a in legal}
    low, high = min(completed.values()), max(completed.values())
    scale = (c_visit + max(visits)) * c_scale
    scores = {a: math.log(prior[a]) + scale * (completed[a] - low) / max(high - low, 1e-8)
              for a in legal}  # fmt: skip
    top = max(scores.values())
    exp = {a: math.exp(s - top) for a, s in scores.items()}
    target = np.zeros(len(mask))
    for a in legal:
        target[a] = exp[a] / sum(exp.values())
    return target


@pytest.mark.parametrize("simulations", [4, 16, 64])
def test_the_policy_target_is_the_softmax_of_logits_plus_completed_q(simulations):
    game = TicTacToe()
    state = play(game, [4, 0])
    evaluate = FixedEvaluator(game)
    config = SearchConfig(simulations=simulations, rule="gumbel", batch_size=1)
    result = search(game, state, evaluate, config, np.random.default_rng(3))
    root_value = float(evaluate([state])[1][0])
    expected = improved_policy_by_definition(result.prior, result.visits, result.value_sums,
                                             root_value, result.legal, 50.0, 0.1)  # fmt: skip
    np.testing.assert_allclose(result.policy_target, expected, rtol=1e-9, atol=1e-12)
    assert result.policy_target[~result.legal].sum() == 0
    assert result.visits.sum() == simulations - 1


def test_with_fewer_simulations_than_actions_only_the_gumbel_top_actions_are_visited():
    game = ConnectFour()
    config = SearchConfig(simulations=4, rule="gumbel", batch_size=1)
    rng = np.random.default_rng(0)
    result = search(game, game.initial_state(), FixedEvaluator(game), config, rng)
    assert np.count_nonzero(result.visits) == 3  # one visit each to the first 3 considered
    assert result.visits[result.action] == 1


class NoisyBandit:
    """A single-player game whose root actions are arms: each leads down a chain of
    states, and the evaluator values each new state of arm ``a`` at ``means[a]`` plus
    noise. So an arm's Q is the mean of noisy samples, the paper's bandit setting."""

    name, num_players, observation_shape = "bandit", 1, (2,)

    def __init__(self, means, noise, seed):
        self.means, self.noise, self.seed = np.asarray(means), noise, seed
        self.num_actions = len(means)

    def initial_state(self):
        return (-1, 0)

    def to_play(self, state):
        return 0

    def legal_mask(self, state):
        return np.ones(self.num_actions, bool) if state[0] < 0 else np.arange(self.num_actions) == 0

    def step(self, state, action):
        return (action, 1) if state[0] < 0 else (state[0], state[1] + 1)

    def is_terminal(self, state):
        return False

    def observation(self, state):
        return np.array(state, np.float32)

    def __call__(self, states):  # the evaluator
        priors = np.array([self.legal_mask(s) for s in states], dtype=float)
        values = []
        for arm, depth in states:
            rng = np.random.default_rng((self.seed, arm + 1, depth))
            values.append(0.0 if arm < 0 else self.means[arm] + self.noise * rng.normal())
        return priors, np.array(values)


@pytest.mark.parametrize("batch_size", [1, 8])
def test_with_every_action_considered_and_enough_simulations_it_picks_the_best_arm(batch_size):
    means = [0.1, -0.2, 0.4, 0.25]  # arm 2 is the best
    config = SearchConfig(simulations=120, rule="gumbel", batch_size=batch_size)
    noisy_picks = []
    for seed in range(5):
        bandit = NoisyBandit(means, noise=0.2, seed=seed)
        rng = np.random.default_rng(seed)
        result = search(bandit, bandit.initial_state(), bandit, config, rng, root_noise=False)
        assert result.action == 2, (seed, result.visits, result.q)
        assert np.count_nonzero(result.visits) == 4  # every arm was considered
        assert int(np.argmax(result.policy_target)) == 2
        # with Gumbel noise (self-play) the pick is a draw, tilted toward the best values
        noisy_picks.append(search(bandit, bandit.initial_state(), bandit, config, rng).action)
    assert noisy_picks.count(2) >= 3, noisy_picks  # the prior alone: 1 in 4


@pytest.mark.parametrize("seed", range(3))
def test_it_takes_a_win_in_one_with_random_rollouts(seed):
    game = ConnectFour()
    win = play(game, [3, 0, 3, 0, 3, 1])
    config = SearchConfig(simulations=200, rule="gumbel", batch_size=8)
    rng = np.random.default_rng(seed)
    result = search(game, win, RolloutEvaluator(game, rng), config, rng, root_noise=False)
    assert result.action == 3, (result.visits, result.q)
    result = search(game, win, RolloutEvaluator(game, rng), config, rng)
    assert int(np.argmax(result.policy_target)) == 3, (result.visits, result.q)


def test_the_policy_target_moves_mass_toward_the_best_valued_move():
    game = ConnectFour()
    state = play(game, [3, 0, 3, 0, 3, 1])
    config = SearchConfig(simulations=32, rule="gumbel", batch_size=1)
    rng = np.random.default_rng(1)
    result = search(game, state, RolloutEvaluator(game, rng), config, rng)
    assert result.policy_target[3] > result.prior[3]
    assert result.policy_target[3] == result.policy_target.max()


def test_without_root_noise_the_search_is_deterministic_and_picks_from_its_last_round():
    game = TicTacToe()
    state = play(game, [0])
    config = SearchConfig(simulations=40, rule="gumbel", batch_size=4)
    evaluate = FixedEvaluator(game)
    first = search(game, state, evaluate, config, np.random.default_rng(0), root_noise=False)
    again = search(game, state, evaluate, config, np.random.default_rng(99), root_noise=False)
    assert first.action == again.action
    np.testing.assert_array_equal(first.visits, again.visits)
    most = first.visits[first.legal].max()
    assert first.visits[first.action] >= most - 1  # an action of the last round
    assert first.choose(temperature=1.0, rng=np.random.default_rng(5)) == first.action


def test_an_unknown_rule_is_refused_naming_the_rules():
    with pytest.raises(ValueError, match="gumbel"):
        SearchConfig(rule="alphago")
