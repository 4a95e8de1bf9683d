"""The shuffle pool of recorded rows: every row drawn once, in a random order."""

import numpy as np

from hrl_tasks.flow.offline_ops import ShufflePool


def test_every_row_is_drawn_once_and_rows_of_files_mix():
    pool = ShufflePool(np.random.default_rng(0))
    for file in range(3):
        ids = np.arange(file * 100, file * 100 + 100)
        pool.add({"rewards": ids.astype(np.float32), "obs": np.stack([ids, -ids], 1)})
    drawn = []
    while len(pool):
        batch = pool.draw(64)
        np.testing.assert_array_equal(batch["obs"][:, 0], batch["rewards"])  # rows stay whole
        drawn.append(batch["rewards"].astype(int))
    assert [len(b) for b in drawn] == [64, 64, 64, 64, 44]
    every = np.concatenate(drawn)
    assert sorted(every.tolist()) == list(range(300))
    assert len({int(x) // 100 for x in drawn[0]}) == 3  # the first batch has rows of each file


def test_rows_added_after_draws_join_those_left():
    pool = ShufflePool(np.random.default_rng(1))
    pool.add({"rewards": np.arange(10.0)})
    first = pool.draw(4)["rewards"]
    pool.add({"rewards": np.arange(10.0, 15.0)})
    assert len(pool) == 11
    rest = pool.draw(100)["rewards"]
    assert sorted([*first, *rest]) == list(range(15))
