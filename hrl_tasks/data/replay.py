"""Replay buffers over `SampleBatch` rows: uniform and prioritized.

Both store rows in a ring of preallocated numpy columns (allocated on the first
`add`, from that batch's dtypes and per-row shapes); once full, the oldest rows
are overwritten. Sampling is with replacement::

    buffer = PrioritizedReplayBuffer(capacity=100_000, alpha=0.6, beta=0.4, seed=0)
    buffer.add(batch)
    sample = buffer.sample(32)            # + "weights" and "batch_indexes" columns
    buffer.update_priorities(sample["batch_indexes"], np.abs(td_errors))
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from hrl_tasks.data.rng import generator_from_state, generator_state
from hrl_tasks.data.sample_batch import SampleBatch


class SumTree:
    """A binary tree over `capacity` leaves keeping subtree sums and minima.

    Stored in two flat arrays of size ``2 * L`` (``L`` the smallest power of two
    >= capacity): node ``i`` has children ``2i`` and ``2i + 1``, the root is
    node 1, leaf ``k`` is node ``L + k``. Unset leaves hold 0 in the sum tree and
    +inf in the min tree. Updates and prefix-sum searches are O(log L) per item
    and vectorized over items.

    Args:
        capacity: Number of leaves.

    Raises:
        ValueError: If `capacity` is not positive.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._leaf0 = 1 << (capacity - 1).bit_length()
        self._depth = self._leaf0.bit_length() - 1
        self._sum = np.zeros(2 * self._leaf0)
        self._min = np.full(2 * self._leaf0, np.inf)

    def update(self, indexes: ArrayLike, values: ArrayLike) -> None:
        """Sets leaves to values; for a repeated index the last value wins.

        Args:
            indexes: Leaf indexes in ``[0, capacity)``.
            values: Non-negative finite values, same shape as `indexes`.

        Raises:
            ValueError: On shape mismatch, an index out of range, or a bad value.
        """
        idx = np.asarray(indexes, dtype=np.intp).ravel()
        vals = np.asarray(values, dtype=np.float64).ravel()
        if idx.shape != vals.shape:
            raise ValueError(f"{idx.size} indexes but {vals.size} values")
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise ValueError(f"leaf indexes must be in [0, {self.capacity})")
        if not np.all(np.isfinite(vals) & (vals >= 0)):
            raise ValueError("SumTree values must be finite and non-negative")
        _, last = np.unique(idx[::-1], return_index=True)
        keep = idx.size - 1 - last
        nodes = idx[keep] + self._leaf0
        self._sum[nodes] = vals[keep]
        self._min[nodes] = vals[keep]
        while nodes[0] > 1:  # all nodes of one pass are on the same level
            nodes = np.unique(nodes // 2)
            self._sum[nodes] = self._sum[2 * nodes] + self._sum[2 * nodes + 1]
            self._min[nodes] = np.minimum(self._min[2 * nodes], self._min[2 * nodes + 1])

    def __getitem__(self, indexes: ArrayLike) -> np.ndarray:
        """Returns the leaf values at `indexes`."""
        return self._sum[np.asarray(indexes, dtype=np.intp) + self._leaf0]

    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[1])

    def min(self) -> float:
        """Minimum over the leaves that were set; +inf if none."""
        return float(self._min[1])

    def find_prefixsum_idx(self, prefixsums: ArrayLike) -> np.ndarray:
        """Finds, for each mass m, the leaf k with ``sum(v[:k]) <= m < sum(v[:k+1])``.

        Drawing m uniformly from ``[0, total())`` thus picks leaf k with
        probability ``v[k] / total()``.

        Args:
            prefixsums: Masses in ``[0, total()]``.

        Returns:
            Leaf indexes, same shape as `prefixsums`.

        Raises:
            ValueError: If a mass is outside ``[0, total()]``.
        """
        mass = np.array(prefixsums, dtype=np.float64)
        if np.any((mass < 0) | (mass > self.total())):
            raise ValueError(f"prefix sums must be in [0, {self.total()}]")
        node = np.ones(mass.shape, dtype=np.intp)
        for _ in range(self._depth):
            left = 2 * node
            go_right = mass >= self._sum[left]
            mass = np.where(go_right, mass - self._sum[left], mass)
            node = np.where(go_right, left + 1, left)
        return np.minimum(node - self._leaf0, self.capacity - 1)


class ReplayBuffer:
    """A uniform ring-buffer replay over SampleBatch rows.

    Args:
        capacity: Maximum number of rows kept.
        seed: Seed for the sampling generator.

    Raises:
        ValueError: If `capacity` is not positive.
    """

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._rng = np.random.default_rng(seed)
        self._storage: dict[str, np.ndarray] = {}
        self._next = 0
        self._size = 0

    def get_rng_state(self) -> dict[str, Any]:
        """The sampling generator's state, as plain data (contents are not included)."""
        return generator_state(self._rng)

    def set_rng_state(self, state: dict[str, Any]) -> None:
        self._rng = generator_from_state(state)

    def __len__(self) -> int:
        """Number of rows currently stored."""
        return self._size

    def add(self, batch: SampleBatch) -> np.ndarray:
        """Appends the rows of `batch`, overwriting the oldest rows when full.

        Args:
            batch: Rows with the same columns and per-row shapes as earlier adds.

        Returns:
            The slot index of each stored row; if `batch` is longer than
            `capacity` only its last `capacity` rows are stored.

        Raises:
            TypeError: If `batch` is not a SampleBatch.
            ValueError: If its columns or per-row shapes differ from the stored ones.
        """
        if not isinstance(batch, SampleBatch):
            raise TypeError(f"ReplayBuffer.add expects a SampleBatch, got {type(batch).__name__}")
        if len(batch) == 0:
            return np.zeros(0, dtype=np.intp)
        if not self._storage:
            self._storage = {
                n: np.empty((self.capacity, *a.shape[1:]), a.dtype) for n, a in batch.items()
            }
        self._check_layout(batch)
        rows = batch[max(0, len(batch) - self.capacity) :]
        slots = (self._next + np.arange(len(rows))) % self.capacity
        for name, store in self._storage.items():
            store[slots] = rows[name]
        self._next = (self._next + len(rows)) % self.capacity
        self._size = min(self._size + len(rows), self.capacity)
        return slots

    def sample(self, n: int) -> SampleBatch:
        """Draws `n` rows uniformly at random, with replacement.

        Args:
            n: Number of rows.

        Returns:
            A SampleBatch of copies of the drawn rows.

        Raises:
            ValueError: If the buffer is empty or `n` is not positive.
        """
        self._check_can_sample(n)
        return self._gather(self._rng.integers(0, self._size, size=n))

    def _gather(self, slots: np.ndarray) -> SampleBatch:
        return SampleBatch({name: store[slots] for name, store in self._storage.items()})

    def _check_can_sample(self, n: int) -> None:
        if self._size == 0:
            raise ValueError(f"cannot sample from an empty {type(self).__name__}; add() rows first")
        if n < 1:
            raise ValueError(f"sample size must be positive, got {n}")

    def _check_layout(self, batch: SampleBatch) -> None:
        if set(batch.columns) != set(self._storage):
            raise ValueError(
                f"batch columns {sorted(batch.columns)} differ from stored {sorted(self._storage)}"
            )
        for name, store in self._storage.items():
            if batch[name].shape[1:] != store.shape[1:]:
                raise ValueError(
                    f"column {name!r}: row shape {batch[name].shape[1:]}, stored {store.shape[1:]}"
                )


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    Row i is drawn with probability ``P(i) = p_i / sum_k p_k`` where
    ``p_i = (priority_i + eps) ** alpha``. Sampled batches get a ``weights``
    column, the importance-sampling weights ``w_i = (N * P(i)) ** -beta``
    divided by the largest possible weight in the buffer, ``(N * min_k P(k)) **
    -beta``, so that weights are <= 1; and a ``batch_indexes`` column of slots to
    pass back to `update_priorities`. New rows get the largest priority seen so
    far unless priorities are given (as Ape-X actors do).

    Args:
        capacity: Maximum number of rows kept.
        alpha: Priority exponent; 0 gives uniform sampling.
        beta: Importance-sampling exponent; 1 fully corrects the sampling bias.
        eps: Added to every priority so no row has zero probability.
        seed: Seed for the sampling generator.

    Raises:
        ValueError: If `capacity` is not positive or alpha, beta or eps is negative.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, seed)
        if min(alpha, beta, eps) < 0:
            raise ValueError(f"alpha, beta, eps must be >= 0, got {alpha}, {beta}, {eps}")
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self._tree = SumTree(capacity)
        self._max_priority = 1.0

    def add(self, batch: SampleBatch, priorities: ArrayLike | None = None) -> np.ndarray:
        """Appends rows like `ReplayBuffer.add`, with optional initial priorities.

        Args:
            batch: Rows to store.
            priorities: One non-negative priority per row (e.g. |TD error|);
                default: the largest priority seen so far.

        Returns:
            The slot index of each stored row.

        Raises:
            ValueError: If priorities do not match the rows or are invalid.
        """
        if priorities is None:
            raw = np.full(len(batch), self._max_priority)
        else:
            raw = np.asarray(priorities, dtype=np.float64)
            if raw.shape != (len(batch),):
                raise ValueError(f"need one priority per row ({len(batch)}), got {raw.shape}")
        scaled = self._scale(raw)
        slots = super().add(batch)
        self._tree.update(slots, scaled[len(scaled) - len(slots) :])
        if raw.size:
            self._max_priority = max(self._max_priority, float(raw.max()))
        return slots

    def sample(self, n: int, beta: float | None = None) -> SampleBatch:
        """Draws `n` rows with probability proportional to their scaled priority.

        Args:
            n: Number of rows.
            beta: Overrides the importance-sampling exponent (for annealing).

        Returns:
            A SampleBatch of the drawn rows plus float32 ``weights`` and integer
            ``batch_indexes`` columns.

        Raises:
            ValueError: If the buffer is empty or `n` is not positive.
        """
        self._check_can_sample(n)
        beta = self.beta if beta is None else beta
        total = self._tree.total()
        masses = self._rng.random(n) * total
        slots = np.minimum(self._tree.find_prefixsum_idx(masses), self._size - 1)
        weights = (self._tree[slots] / self._tree.min()) ** -beta
        batch = self._gather(slots)
        batch[SampleBatch.WEIGHTS] = weights.astype(np.float32)
        batch[SampleBatch.BATCH_INDEXES] = slots
        return batch

    def update_priorities(self, indexes: ArrayLike, priorities: ArrayLike) -> None:
        """Sets new priorities for stored rows (a slot overwritten since sampling
        gets the priority anyway).

        Args:
            indexes: Slots, e.g. a sample's ``batch_indexes`` column.
            priorities: Non-negative priorities, same shape.

        Raises:
            ValueError: On shape mismatch, slots not holding rows, or bad priorities.
        """
        idx = np.asarray(indexes, dtype=np.intp)
        raw = np.asarray(priorities, dtype=np.float64)
        if idx.shape != raw.shape:
            raise ValueError(f"indexes shape {idx.shape} != priorities shape {raw.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise ValueError(f"indexes must be in [0, {self._size}), the stored rows")
        self._tree.update(idx, self._scale(raw))
        if raw.size:
            self._max_priority = max(self._max_priority, float(raw.max()))

    def _scale(self, raw: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(raw) & (raw >= 0)):
            raise ValueError("priorities must be finite and non-negative")
        scaled = (raw + self.eps) ** self.alpha
        if np.any(scaled <= 0):
            raise ValueError("priority + eps must be positive; use eps > 0 for zero priorities")
        return scaled
