"""Trajectory postprocessing as torch-free functions of one env's fragment.

A policy's `postprocess_trajectory` is one of these with its config's
constants bound (``functools.partial``), so a numpy inference copy of the
policy (see `Policy.inference_copy`) postprocesses exactly as the policy does,
in a process that never imports torch.
"""

from __future__ import annotations

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.estimators import gae

GAE_COLUMNS = (
    SampleBatch.REWARDS,
    SampleBatch.VALUES,
    SampleBatch.NEXT_VALUES,
    SampleBatch.TERMINATEDS,
    SampleBatch.TRUNCATEDS,
)


def add_gae(batch: SampleBatch, gamma: float, lam: float) -> SampleBatch:
    """Adds ``advantages`` and ``value_targets`` (float32) to a fragment with `estimators.gae`.

    Reads ``rewards``, ``values``, ``next_values``, ``terminateds`` and
    ``truncateds``; columns may be ``[T]`` or time-major ``[T, N]``.

    Args:
        batch: One env's fragment, rows in time order.
        gamma: Discount factor.
        lam: GAE lambda.

    Returns:
        A new batch with all of `batch`'s columns plus the two new ones.

    Raises:
        KeyError: If a needed column is missing.
    """
    missing = [c for c in GAE_COLUMNS if c not in batch]
    if missing:
        raise KeyError(f"GAE postprocessing needs columns {missing}; have {batch.columns}")
    advantages, targets = gae(*(batch[c] for c in GAE_COLUMNS), gamma=gamma, lam=lam)
    return SampleBatch(
        {
            **dict(batch.items()),
            SampleBatch.ADVANTAGES: advantages.astype(np.float32),
            SampleBatch.VALUE_TARGETS: targets.astype(np.float32),
        }
    )


def add_discounted_returns(batch: SampleBatch, gamma: float) -> SampleBatch:
    """Adds the discounted returns as both ``advantages`` and ``value_targets``
    (REINFORCE without a baseline): sums cut at episode ends and at the
    fragment's end, with no bootstrap values.

    Args:
        batch: One env's fragment with ``rewards``, ``terminateds`` and ``truncateds``.
        gamma: Discount factor.

    Returns:
        A new batch with `batch`'s columns plus the two new ones.
    """
    zeros = np.zeros(np.shape(batch[SampleBatch.REWARDS]), np.float32)
    no_values = {SampleBatch.VALUES: zeros, SampleBatch.NEXT_VALUES: zeros}
    with_returns = add_gae(SampleBatch({**dict(batch.items()), **no_values}), gamma, 1.0)
    columns = dict(batch.items())
    for name in (SampleBatch.ADVANTAGES, SampleBatch.VALUE_TARGETS):
        columns[name] = with_returns[name]
    return SampleBatch(columns)
