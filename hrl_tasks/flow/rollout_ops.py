"""Operators that produce and shape experience: RLlib Flow's rollout ops."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hrl_tasks.data import MultiAgentBatch
from hrl_tasks.flow.context import STEPS_SAMPLED, FlowContext
from hrl_tasks.flow.iterators import LocalIterator, ParallelIterator

MODES = ("bulk_sync", "async", "raw")


def _record(ctx: FlowContext, batch, metrics: dict, workers=None):
    if workers is not None:
        workers.note_observation_stats(metrics)
    ctx.counters[STEPS_SAMPLED] += batch.env_steps()
    ctx.add_episodes(metrics)
    ctx.counters["env_errors"] += int(metrics.get("env_errors", 0))
    return batch


def ParallelRollouts(
    workers,
    ctx: FlowContext,
    mode: str = "bulk_sync",
    num_async: int = 1,
    speculative=True,
    prefetch: bool = False,
    keep: bool = False,
):
    """Experience from the rollout workers of a ``WorkerSet``.

    Args:
        workers: the ``WorkerSet``.
        ctx: the plan's metrics context (steps sampled and episodes go there).
        mode: ``"bulk_sync"``: each step, one batch from every worker,
            concatenated. ``"async"``: batches as they come, ``num_async``
            requests in flight per worker. ``"raw"``: the
            :class:`ParallelIterator` itself, for plans that run their own
            operators on the workers.
        num_async: requests in flight per worker in ``"async"`` mode.
        speculative: back up straggling sample calls on idle peers
            (bulk-synchronous mode; equivalent workers give equivalent batches).
        prefetch: in bulk-synchronous mode, send the next round's sample calls
            before this round's batch is used, so sampling overlaps with
            learning; those samples are one weight update behind.
        keep: in ``"raw"`` mode with direct calls: each batch stays on its worker
            and the iterators yield TaskRefs of ``(batch, metrics)`` (for a learner
            that fetches them itself, `hrl_tasks.rollout.async_learner`).

    Returns:
        A :class:`LocalIterator` of SampleBatches (or the ParallelIterator for ``"raw"``).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    handles = list(workers.remote_workers)
    if not handles:  # no remote workers: sample in the driver

        def local():
            while True:
                with ctx.timer("sample"):
                    batch, metrics = workers.local_worker.sample()
                yield _record(ctx, batch, metrics, workers)

        return LocalIterator(local(), "ParallelRollouts(local)")
    parallel = ParallelIterator(
        workers.engine,
        handles,
        "sample",
        speculative=speculative and mode == "bulk_sync",
        before_call=workers.sample_kwargs,  # deferred weights; re-syncs re-created workers
        direct=workers.direct_calls,
        keep=keep,
    )
    if mode == "raw":
        return parallel
    if mode == "async":

        def async_batches():
            for _, (batch, metrics) in parallel.zip_with_source_actor(num_async):
                yield _record(ctx, batch, metrics, workers)

        return LocalIterator(async_batches(), "ParallelRollouts(async)")

    def bulk():
        for results in parallel.gather_sync(prefetch=prefetch):
            batches = [_record(ctx, batch, metrics, workers) for batch, metrics in results]
            yield type(batches[0]).concat_samples(batches)  # SampleBatch or MultiAgentBatch

    def timed():
        it = bulk()
        while True:
            with ctx.timer("sample"):
                batch = next(it)
            yield batch

    return LocalIterator(timed(), "ParallelRollouts(bulk_sync)")


class ConcatBatches:
    """Collect batches until they hold at least ``min_batch_size`` env steps, then yield one.

    Use with ``.combine(ConcatBatches(n))``.
    """

    def __init__(self, min_batch_size: int):
        if min_batch_size < 1:
            raise ValueError(f"min_batch_size must be >= 1, got {min_batch_size}")
        self.min_batch_size = min_batch_size
        self.buffer: list = []
        self.count = 0

    def __call__(self, batch) -> list:
        self.buffer.append(batch)
        self.count += batch.env_steps()
        if self.count < self.min_batch_size:
            return []
        out = type(batch).concat_samples(self.buffer)
        self.buffer, self.count = [], 0
        return [out]


class StandardizeFields:
    """Standardize the given columns of each batch to zero mean and unit variance."""

    def __init__(self, fields: Sequence[str]):
        self.fields = tuple(fields)

    def __call__(self, batch):
        if isinstance(batch, MultiAgentBatch):
            return MultiAgentBatch(
                {pid: self(b) for pid, b in batch.items()}, env_steps=batch.env_steps()
            )
        out = batch.copy()
        for name in self.fields:
            if name not in out.columns:
                raise KeyError(f"cannot standardize {name!r}: the batch has {sorted(out.columns)}")
            values = np.asarray(out[name], dtype=np.float32)
            out[name] = (values - values.mean()) / max(1e-8, float(values.std()))
        return out


class SelectExperiences:
    """Keep only the given policies' experience of a MultiAgentBatch."""

    def __init__(self, policy_ids: Sequence[str]):
        self.policy_ids = tuple(policy_ids)

    def __call__(self, batch):
        if not isinstance(batch, MultiAgentBatch):
            return batch
        kept = {pid: b for pid, b in batch.items() if pid in self.policy_ids}
        return MultiAgentBatch(kept, env_steps=batch.env_steps())
