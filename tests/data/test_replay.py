import numpy as np
import pytest

from hrl_tasks.data import PrioritizedReplayBuffer, ReplayBuffer, SampleBatch, SumTree

# 99.9% quantiles of the chi-square distribution, by degrees of freedom.
CHI2_999 = {3: 16.27, 4: 18.47, 9: 27.88}


def rows(start: int, stop: int) -> SampleBatch:
    ids = np.arange(start, stop)
    return SampleBatch({"id": ids, "obs": np.stack([ids, ids * 2], axis=1).astype(np.float32)})


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def test_uniform_sampling_is_uniform():
    buffer = ReplayBuffer(capacity=10, seed=0)
    buffer.add(rows(0, 10))
    sample = buffer.sample(20_000)
    np.testing.assert_array_equal(sample["obs"][:, 1], 2 * sample["id"])  # rows stay whole
    counts = np.bincount(sample["id"], minlength=10)
    assert chi_square(counts, np.full(10, 0.1)) < CHI2_999[9]


def test_ring_buffer_overwrites_oldest_rows():
    buffer = ReplayBuffer(capacity=5, seed=1)
    assert buffer.add(rows(0, 3)).tolist() == [0, 1, 2]
    assert buffer.add(rows(3, 8)).tolist() == [3, 4, 0, 1, 2]
    assert len(buffer) == 5
    assert set(buffer.sample(500)["id"]) == {3, 4, 5, 6, 7}
    # A batch longer than the capacity keeps its last rows.
    buffer.add(rows(100, 112))
    assert set(buffer.sample(500)["id"]) == set(range(107, 112))


def test_replay_errors():
    buffer = ReplayBuffer(capacity=4)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1)
    buffer.add(rows(0, 2))
    with pytest.raises(ValueError, match="columns"):
        buffer.add(SampleBatch({"id": np.arange(2)}))
    with pytest.raises(ValueError, match="row shape"):
        buffer.add(SampleBatch({"id": np.arange(2), "obs": np.zeros((2, 3))}))
    with pytest.raises(ValueError, match="empty"):
        PrioritizedReplayBuffer(capacity=4).sample(2)
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0)


@pytest.mark.parametrize("capacity", [1, 5, 8, 13])
def test_sum_tree_invariants_and_prefix_search(capacity):
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    leaves = np.zeros(capacity)
    for _ in range(20):
        idx = rng.integers(0, capacity, size=rng.integers(1, 4))
        vals = rng.uniform(0.1, 5.0, size=idx.size)
        tree.update(idx, vals)
        for i, v in zip(idx, vals, strict=True):
            leaves[i] = v  # the last value of a repeated index wins
        internal = np.arange(1, tree._leaf0)
        np.testing.assert_allclose(
            tree._sum[internal], tree._sum[2 * internal] + tree._sum[2 * internal + 1]
        )
        np.testing.assert_array_equal(
            tree._min[internal], np.minimum(tree._min[2 * internal], tree._min[2 * internal + 1])
        )
        np.testing.assert_allclose(tree[np.arange(capacity)], leaves)
        assert tree.total() == pytest.approx(leaves.sum())
        assert tree.min() == leaves[leaves > 0].min()
        masses = rng.uniform(0, tree.total(), size=50)
        expected = np.searchsorted(np.cumsum(leaves), masses, side="right")
        np.testing.assert_array_equal(tree.find_prefixsum_idx(masses), expected)


def test_sum_tree_rejects_bad_input():
    tree = SumTree(4)
    with pytest.raises(ValueError):
        tree.update([4], [1.0])
    with pytest.raises(ValueError):
        tree.update([0], [-1.0])
    with pytest.raises(ValueError):
        tree.find_prefixsum_idx([1.0])  # total is 0


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_prioritized_frequencies_follow_priorities_to_the_alpha(alpha):
    buffer = PrioritizedReplayBuffer(capacity=4, alpha=alpha, beta=0.4, eps=0.0, seed=2)
    priorities = np.array([1.0, 2.0, 3.0, 4.0])
    buffer.add(rows(0, 4), priorities=priorities)
    counts = np.bincount(buffer.sample(40_000)["id"], minlength=4)
    probs = priorities**alpha / (priorities**alpha).sum()
    assert chi_square(counts, probs) < CHI2_999[3]


def test_update_priorities_changes_sampling():
    buffer = PrioritizedReplayBuffer(capacity=8, alpha=1.0, eps=0.0, seed=3)
    buffer.add(rows(0, 5))
    buffer.update_priorities(np.arange(5), [1e-3, 1e-3, 1e-3, 1e-3, 10.0])
    ids = buffer.sample(2_000)["id"]
    assert (ids == 4).mean() > 0.99
    with pytest.raises(ValueError, match="stored rows"):
        buffer.update_priorities([5], [1.0])  # slot 5 holds no row yet


def test_importance_weights_hand_computed():
    # alpha=1, eps=0: P = [1, 4] / 5. w_i = (N P_i)^-beta / max_j (N P_j)^-beta, beta = 0.5:
    # w = [(2 * 0.2)^-0.5, (2 * 0.8)^-0.5] / (2 * 0.2)^-0.5 = [1, sqrt(0.4 / 1.6)] = [1, 0.5].
    buffer = PrioritizedReplayBuffer(capacity=2, alpha=1.0, beta=0.5, eps=0.0, seed=4)
    buffer.add(rows(0, 2), priorities=[1.0, 4.0])
    sample = buffer.sample(200)
    np.testing.assert_array_equal(sample[SampleBatch.BATCH_INDEXES], sample["id"])
    np.testing.assert_allclose(sample[SampleBatch.WEIGHTS], np.where(sample["id"] == 0, 1.0, 0.5))
    assert sample[SampleBatch.WEIGHTS].dtype == np.float32
    # beta=1 fully corrects: weights are proportional to 1 / P.
    np.testing.assert_allclose(buffer.sample(50, beta=1.0)[SampleBatch.WEIGHTS].min(), 0.25)


def test_new_rows_get_max_priority():
    buffer = PrioritizedReplayBuffer(capacity=4, alpha=1.0, eps=0.0, seed=5)
    buffer.add(rows(0, 1), priorities=[5.0])
    buffer.add(rows(1, 3))
    np.testing.assert_allclose(buffer._tree[np.arange(3)], [5.0, 5.0, 5.0])
    with pytest.raises(ValueError, match="one priority per row"):
        buffer.add(rows(3, 4), priorities=[1.0, 2.0])
    with pytest.raises(ValueError, match="eps"):
        buffer.add(rows(3, 4), priorities=[0.0])
    assert len(buffer) == 3  # failed adds store nothing
