"""Running observation statistics: merged parts equal the whole."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.data.running_stats import RunningStats


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=8), seed=st.integers(0, 1000))
def test_merging_parts_gives_the_statistics_of_all_rows(sizes, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(3.0, 2.0, size=(n, 4)) for n in sizes]
    merged = RunningStats.empty((4,))
    for part in parts:
        merged = merged.merge(RunningStats.of(part, (4,)))
    whole = np.concatenate(parts)
    assert merged.count == len(whole)
    np.testing.assert_allclose(merged.mean, whole.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged.var, whole.var(axis=0), rtol=1e-9, atol=1e-9)


def test_time_major_rows_and_the_state_round_trip():
    rows = np.arange(24, dtype=np.float32).reshape(3, 2, 4)  # [T, N, obs]
    stats = RunningStats.of(rows, (4,))
    assert stats.count == 6
    np.testing.assert_allclose(stats.mean, rows.reshape(6, 4).mean(axis=0))
    again = RunningStats.from_state(stats.state())
    assert again.count == 6 and np.array_equal(again.m2, stats.m2)
    np.testing.assert_array_equal(RunningStats.empty((4,)).var, np.ones(4))
