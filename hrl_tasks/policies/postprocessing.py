"""Trajectory postprocessing as torch-free functions of one env's fragment.

A policy's `postprocess_trajectory` is one of these with its config's
constants bound (``functools.partial``), so a numpy inference copy of the
policy (see `Policy.inference_copy`) postprocesses exactly as the policy does,
in a process that never imports torch.
"""

from __future__ import annotations

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.policies.estimators import gae, n_step_returns

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


N_STEP_DISCOUNTS = "discounts"
"""Column of per-row bootstrap discounts ``gamma^m (1 - terminated)`` written by
`n_step_transitions`."""


def n_step_transitions(batch: SampleBatch, gamma: float, n_step: int) -> SampleBatch:
    """One env's fragment with each row ``t`` rewritten as an n-step transition, for
    replay learners (`estimators.n_step_returns`): ``rewards`` = ``R_t``; ``next_obs``,
    ``terminateds`` and ``truncateds`` from row ``b_t``; a new ``discounts`` column =
    ``D_t``. ``next_obs`` on a truncated row must be the final observation before the
    reset. The batch itself when ``n_step == 1``."""
    if n_step == 1:
        return batch
    terminateds, truncateds = batch[SampleBatch.TERMINATEDS], batch[SampleBatch.TRUNCATEDS]
    returns, discounts, last = n_step_returns(
        batch[SampleBatch.REWARDS], terminateds, gamma, n_step, truncateds
    )
    columns = dict(batch.items())
    columns[SampleBatch.REWARDS] = returns.astype(np.float32)
    columns[N_STEP_DISCOUNTS] = discounts.astype(np.float32)
    for name in (SampleBatch.NEXT_OBS, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS):
        column = batch[name]
        index = last.reshape(last.shape + (1,) * (column.ndim - last.ndim))
        columns[name] = np.take_along_axis(column, index, axis=0)
    return SampleBatch(columns)
