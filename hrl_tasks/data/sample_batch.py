"""Columnar batches of experience: `SampleBatch` and `MultiAgentBatch`.

A `SampleBatch` is a set of named numpy columns of equal length; row ``i`` of
every column belongs to the same environment step. It is the one data type that
flows from rollout workers through replay buffers to losses::

    batch = SampleBatch({SampleBatch.OBS: obs, SampleBatch.REWARDS: rewards})
    for mb in batch.minibatches(64, rng):
        loss = policy.loss(mb)

``len(batch)`` is the number of rows (steps), not the number of columns, and
iterating a batch yields its column names, as RLlib's SampleBatch does.
Slices are numpy views; `copy` makes writable deep copies (arrays decoded by
`hrl_tasks.data.codec` are read-only).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

DEFAULT_POLICY_ID = "default_policy"

Rng = np.random.Generator | int | None


def checked_columns(columns: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """``columns`` as arrays, checked: str names, a row axis, the same length for all.

    Raises:
        TypeError: for a name that is not a str.
        ValueError: for a 0-d column, or columns of different lengths.
    """
    checked = {}
    for name, value in columns.items():
        if not isinstance(name, str):
            raise TypeError(f"column names must be str, got {name!r}")
        array = np.asarray(value)
        if array.ndim == 0:
            raise ValueError(f"column {name!r} is 0-d; columns need a row axis")
        checked[name] = array
    lengths = {name: len(a) for name, a in checked.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{n}={k}" for n, k in lengths.items())
        raise ValueError(f"all columns must have the same length, got {listed}")
    return checked


_decoded = [0]  # SampleBatches made from bytes in this process: see `batches_decoded`


def batches_decoded() -> int:
    """How many SampleBatches this process has made from bytes: each one unpickled or
    decoded by the codec (those of a `MultiAgentBatch` too), as batches arriving from
    another process are. Where a plan's experience passes, it is counted."""
    return _decoded[0]


def decoded_batch(columns: Mapping[str, ArrayLike]) -> SampleBatch:
    """A SampleBatch made from received bytes, counted (`batches_decoded`)."""
    _decoded[0] += 1
    return SampleBatch(columns)


class SampleBatch:
    """A dict of equal-length numpy arrays, one row per environment step.

    Args:
        columns: Mapping from column name to array-like with at least one
            dimension; the first dimension is the row axis.

    Raises:
        TypeError: If a column name is not a string.
        ValueError: If a column is 0-d or the columns differ in length.
    """

    OBS = "obs"
    NEXT_OBS = "next_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    LOGP = "logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VALUES = "values"
    NEXT_VALUES = "next_values"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    EPS_ID = "eps_id"
    ENV_ID = "env_id"
    T = "t"
    WEIGHTS = "weights"
    BATCH_INDEXES = "batch_indexes"

    def __init__(self, columns: Mapping[str, ArrayLike] | None = None) -> None:
        self._columns: dict[str, np.ndarray] = checked_columns({} if columns is None else columns)

    def __reduce__(self):
        return decoded_batch, (self._columns,)

    # Mapping-like access -------------------------------------------------------

    def __len__(self) -> int:
        """Number of rows (steps), not columns."""
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def __getitem__(self, key: str | slice) -> np.ndarray | SampleBatch:
        """Returns a column by name, or a `SampleBatch` of views for a slice."""
        if isinstance(key, str):
            return self._columns[key]
        if isinstance(key, slice):
            return SampleBatch({n: a[key] for n, a in self._columns.items()})
        raise TypeError(f"index a SampleBatch by column name or slice, not {type(key).__name__}")

    def __setitem__(self, name: str, value: ArrayLike) -> None:
        """Adds or replaces a column; its length must match the other columns."""
        self._columns = checked_columns({**self._columns, name: value})

    def __delitem__(self, name: str) -> None:
        del self._columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def keys(self) -> Iterable[str]:
        return self._columns.keys()

    def values(self) -> Iterable[np.ndarray]:
        return self._columns.values()

    def items(self) -> Iterable[tuple[str, np.ndarray]]:
        return self._columns.items()

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names in insertion order."""
        return tuple(self._columns)

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {a.dtype}{a.shape[1:]}" for n, a in self._columns.items())
        return f"SampleBatch(len={len(self)}, columns=[{cols}])"

    # Row operations ------------------------------------------------------------

    def env_steps(self) -> int:
        """Number of environment steps, i.e. rows."""
        return len(self)

    def agent_steps(self) -> int:
        """Number of agent steps; equal to `env_steps` for a single-agent batch."""
        return len(self)

    def copy(self) -> SampleBatch:
        """Returns a deep copy whose arrays are writable and own their memory."""
        return SampleBatch({n: a.copy() for n, a in self._columns.items()})

    def take(self, indices: ArrayLike) -> SampleBatch:
        """Returns the rows at integer `indices` (copies, any order, repeats allowed)."""
        idx = np.asarray(indices, dtype=np.intp)
        return SampleBatch({n: a[idx] for n, a in self._columns.items()})

    def shuffle(self, rng: Rng = None) -> SampleBatch:
        """Returns a new batch with the rows in a random order.

        Args:
            rng: A numpy Generator, or a seed for one.

        Returns:
            A permuted copy; `self` is unchanged.
        """
        return self.take(np.random.default_rng(rng).permutation(len(self)))

    def minibatches(
        self, size: int, rng: Rng = None, drop_last: bool = False
    ) -> Iterator[SampleBatch]:
        """Shuffles once, then yields consecutive minibatches of `size` rows.

        A `size` that covers the batch yields the batch itself, unshuffled (a
        full-batch gradient does not depend on the row order).

        Args:
            size: Rows per minibatch.
            rng: A numpy Generator, or a seed for one.
            drop_last: Skip the final minibatch when it has fewer than `size` rows.

        Yields:
            SampleBatch views of the shuffled batch.

        Raises:
            ValueError: If `size` is not positive.
        """
        if size <= 0:
            raise ValueError(f"minibatch size must be positive, got {size}")
        if size >= len(self):  # one minibatch of every row: its order does not matter
            yield self
            return
        shuffled = self.shuffle(rng)
        stop = len(self) - len(self) % size if drop_last else len(self)
        for start in range(0, stop, size):
            yield shuffled[start : start + size]

    def split_by_episode(self) -> list[SampleBatch]:
        """Splits the rows into one batch per value of the `EPS_ID` column.

        Episodes are ordered by their first row; rows keep their order within an
        episode, so interleaved rows (e.g. from a vector env) are grouped too.

        Returns:
            A list of batches, one per episode id.

        Raises:
            KeyError: If the batch has no `EPS_ID` column.
            ValueError: If the `EPS_ID` column is not 1-D.
        """
        if self.EPS_ID not in self._columns:
            raise KeyError(f"split_by_episode needs an {self.EPS_ID!r} column; have {self.columns}")
        ids = self._columns[self.EPS_ID]
        if ids.ndim != 1:
            raise ValueError(f"the {self.EPS_ID!r} column must be 1-D, got shape {ids.shape}")
        _, first, inverse, counts = np.unique(
            ids, return_index=True, return_inverse=True, return_counts=True
        )
        rows = np.split(np.argsort(inverse.ravel(), kind="stable"), np.cumsum(counts)[:-1])
        episodes = []
        for group in np.argsort(first):
            idx = rows[group]
            contiguous = idx[-1] - idx[0] + 1 == len(idx)
            episodes.append(self[int(idx[0]) : int(idx[-1]) + 1] if contiguous else self.take(idx))
        return episodes

    @staticmethod
    def concat_samples(batches: Sequence[SampleBatch]) -> SampleBatch:
        """Concatenates batches row-wise.

        Batches without columns are skipped; the others must have the same
        column names. An empty input gives an empty batch.

        Args:
            batches: The batches to concatenate, in order.

        Returns:
            A new SampleBatch.

        Raises:
            TypeError: If an element is not a SampleBatch.
            ValueError: If the column names or per-row shapes differ.
        """
        for b in batches:
            if not isinstance(b, SampleBatch):
                hint = (
                    " (use MultiAgentBatch.concat_samples)"
                    if isinstance(b, MultiAgentBatch)
                    else ""
                )
                raise TypeError(f"concat_samples expects SampleBatch, got {type(b).__name__}{hint}")
        batches = [b for b in batches if b.columns]
        if not batches:
            return SampleBatch()
        names = set(batches[0].columns)
        for i, b in enumerate(batches[1:], start=1):
            if set(b.columns) != names:
                raise ValueError(
                    f"batch {i} has different columns than batch 0: "
                    f"missing {sorted(names - set(b.columns))}, extra {sorted(set(b.columns) - names)}"
                )
        out = {}
        for name in batches[0].columns:
            try:
                out[name] = np.concatenate([b[name] for b in batches])
            except ValueError as err:
                shapes = [b[name].shape[1:] for b in batches]
                raise ValueError(
                    f"cannot concatenate column {name!r}, row shapes {shapes}"
                ) from err
        return SampleBatch(out)

    def as_multi_agent(self, policy_id: Hashable = DEFAULT_POLICY_ID) -> MultiAgentBatch:
        """Wraps this batch as a `MultiAgentBatch` with a single policy."""
        return MultiAgentBatch({policy_id: self}, env_steps=len(self))


class MultiAgentBatch(Mapping):
    """A mapping from policy id to `SampleBatch`, plus an explicit env-step count.

    In a multi-agent env one env step may produce rows for several policies, so
    the env-step count is stored, not derived. `len()` is the number of
    policies, as for any mapping.

    Args:
        policy_batches: Mapping from policy id (a str or int) to SampleBatch.
        env_steps: Number of environment steps these batches came from.

    Raises:
        TypeError: If a value is not a SampleBatch.
        ValueError: If `env_steps` is negative.
    """

    def __init__(self, policy_batches: Mapping[Hashable, SampleBatch], env_steps: int) -> None:
        for pid, batch in policy_batches.items():
            if not isinstance(batch, SampleBatch):
                raise TypeError(f"policy {pid!r}: expected SampleBatch, got {type(batch).__name__}")
        if int(env_steps) < 0:
            raise ValueError(f"env_steps must be >= 0, got {env_steps}")
        self.policy_batches: dict[Hashable, SampleBatch] = dict(policy_batches)
        self._env_steps = int(env_steps)

    def __getitem__(self, policy_id: Hashable) -> SampleBatch:
        return self.policy_batches[policy_id]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.policy_batches)

    def __len__(self) -> int:
        return len(self.policy_batches)

    def __repr__(self) -> str:
        sizes = {pid: len(b) for pid, b in self.policy_batches.items()}
        return f"MultiAgentBatch(env_steps={self._env_steps}, agent_steps={sizes})"

    def env_steps(self) -> int:
        """Number of environment steps (the explicit count given at construction)."""
        return self._env_steps

    def agent_steps(self) -> int:
        """Total rows over all policies."""
        return sum(len(b) for b in self.policy_batches.values())

    def copy(self) -> MultiAgentBatch:
        """Returns a deep copy."""
        return MultiAgentBatch({p: b.copy() for p, b in self.items()}, self._env_steps)

    @staticmethod
    def concat_samples(batches: Sequence[MultiAgentBatch]) -> MultiAgentBatch:
        """Concatenates per policy and sums the env-step counts.

        A policy missing from some batches is concatenated over the others.

        Args:
            batches: The batches to concatenate, in order.

        Returns:
            A new MultiAgentBatch.

        Raises:
            TypeError: If an element is not a MultiAgentBatch.
        """
        per_policy: dict[Hashable, list[SampleBatch]] = {}
        for b in batches:
            if not isinstance(b, MultiAgentBatch):
                raise TypeError(f"expected MultiAgentBatch, got {type(b).__name__}")
            for pid, sb in b.items():
                per_policy.setdefault(pid, []).append(sb)
        return MultiAgentBatch(
            {pid: SampleBatch.concat_samples(sbs) for pid, sbs in per_policy.items()},
            env_steps=sum(b.env_steps() for b in batches),
        )
