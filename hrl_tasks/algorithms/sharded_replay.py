"""Distributed replay, as Ape-X's (Horgan et al. 2018): replay shards in stateful
workers, rollout workers feeding them, a learner reading from them, all at once.

`ShardedReplay` is a mixin of `Algorithm`: `sharded_plan` builds the shards and
the two sub-flows (store and replay) run concurrently, as in RLlib Flow; only the
learner's is reported. Ape-X and SAC/TD3 (with ``num_replay_shards`` > 0) use it.
Each shard is a `ReplayShard` (one prioritized buffer; ``prioritized_alpha`` 0 is
uniform). With ``training_intensity`` a rate limiter holds rows replayed per env
step: the samplers wait for the learner, or it for them.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from hrl_tasks.algorithms.apex.learner import priorities_of
from hrl_tasks.algorithms.apex.replay_shard import ReplayShard
from hrl_tasks.algorithms.sharded_replay_config import (  # noqa: F401 - their old home
    ContinuousReplayConfig,
    ShardedReplayConfig,
    with_shard_processes,
)
from hrl_tasks.data.rate_limiter import BlockingLimiter, SampleToInsertRatio
from hrl_tasks.flow import Concurrently, LocalIterator, StandardMetricsReporting
from hrl_tasks.flow.context import STEPS_SAMPLED
from hrl_tasks.scheduler import WorkerLostError

STORE_STUCK_S = 2.0  # a batch a shard has not taken by then frees its sampler's slot


def _unless_lost(ref, *handles):
    """``ref``'s result, or None if it was lost with a worker that has been re-created.

    A replay shard re-created after its worker died starts empty (its contents
    are not snapshotted: they are large and refill within seconds).
    """
    try:
        return ref.result()
    except WorkerLostError:
        if not all(handle.alive for handle in handles):
            raise
        return None


class ShardedReplay:
    """Mixin of `Algorithm` (list it first): the shards, the store and replay sub-flows,
    priorities sent back, and the shards killed at `stop`."""

    def sharded_plan(self, workers, ctx, learn, reporting=None, learner=None) -> LocalIterator:
        """The plan: rollout workers' batches into the shards; ``learn((shard, batch))``
        on each replayed batch (e.g. a train step, `send_priorities`, the targets).
        Episode metrics come from the handles in ``reporting`` (default: all).

        With ``learner`` (a `RemoteLearner` of an `apex.learner.ReplayLearner`), each
        group of batches goes from its shard to the learner by reference instead, and
        ``learn((shard, reply))`` takes each of the learner's replies."""
        cfg = self.config
        self.stopping = threading.Event()  # ends the two sub-flows' threads at stop()
        self.limiter = self._make_limiter()
        self.pending_priorities = {}  # shard -> [(indexes, priorities)] not sent yet
        self.direct_priorities = workers.direct_calls
        self.shards = [
            workers.engine.create_worker(
                ReplayShard,
                cfg.buffer_size // cfg.num_replay_shards,
                cfg.prioritized_alpha if cfg.prioritized_replay else 0.0,
                cfg.prioritized_beta if cfg.prioritized_replay else 0.0,
                cfg.learning_starts // cfg.num_replay_shards,
                None if cfg.seed is None else cfg.seed + i,
                name=f"ReplayShard-{i}",
                label="ReplayShard",
                strategy="spread",
                max_restarts=cfg.max_restarts,
            )
            for i in range(cfg.num_replay_shards)
        ]
        handles = list(workers.remote_workers)
        self.reporting = set(handles) if reporting is None else set(reporting)
        stored = self._store(workers, ctx, handles, by_reference=learner is not None)
        store_op = LocalIterator(stored, "StoreToReplayShards")
        replayed = (
            self._replay(workers) if learner is None else self._replay_apart(workers, learner)
        )
        replay_op = LocalIterator(replayed, "ReplayFromShards").for_each(
            lambda item: item and learn(item)
        )
        train_op = Concurrently([store_op, replay_op], mode="async", output_indexes=[1])
        return StandardMetricsReporting(train_op, ctx, cfg.min_steps_per_report, workers.engine)

    def after_stored(self, ctx) -> None:
        """Called after each stored batch is counted (e.g. to end uniform exploration)."""

    def _make_limiter(self) -> BlockingLimiter | None:
        """With ``training_intensity``: rows replayed per env step held within one fetched
        group of batches and one sample call of the ratio (`SampleToInsertRatio`)."""
        cfg = self.config
        if cfg.training_intensity is None:
            return None
        fetched = cfg.train_batch_size * cfg.replay_batches_per_call
        sampled = cfg.rollout_fragment_length * cfg.num_envs_per_worker
        ratio = SampleToInsertRatio.for_batches(
            cfg.training_intensity, cfg.learning_starts, fetched, sampled
        )
        return BlockingLimiter(ratio, self.stopping)

    def _store(self, workers, ctx, handles, by_reference=False):
        """Samples go from each rollout worker to a shard; only metrics come here.

        With direct calls and the learner in the driver, a batch passes through the
        driver (a direct call's result lives there): a sample call and then an
        ``add_sample`` call, each a message each way. With a learner apart
        (``by_reference``) each batch stays on its rollout worker (a kept sample
        call) and, once sampled, the shard's ``add_sample`` call is given its TaskRef:
        the shard's worker fetches it, and no batch passes through the driver. With
        the driver's learner that sampled 0.94x the steps per second (the shards'
        fetches cost more than the driver's relay saved; docs/benchmarks.md,
        2026-12-02), so it is kept for the learner apart. Otherwise (no direct
        calls) the sample's TaskRef goes to the shard's call at once and Dask moves
        the batch worker to worker, at the cost of two scheduled tasks.
        Each batch goes to the shard with the fewest batches on their way to it,
        and a sampler whose batch a shard has not taken within ``STORE_STUCK_S``
        samples on (that batch's slot is freed once): a shard that stops answering
        (a frozen worker) holds up no sampler.
        """
        engine, in_flight, direct = workers.engine, {}, workers.direct_calls
        adding = [0] * len(self.shards)  # batches on their way to each shard
        turn = itertools.count()
        stored_since: dict = {}  # add call -> when sent, while only its shard is waited for
        freed: set = set()  # add calls whose slot went on without them

        def add(handle, sample, **how):
            ahead = next(turn)  # equal loads take turns
            i = min(range(len(adding)), key=lambda i: (adding[i], (i - ahead) % len(adding)))
            adding[i] += 1
            ref = self.shards[i].call("add_sample", sample, **how)
            in_flight[ref] = (handle, i, "add")
            if how:  # sampled: only the shard (fetching it, storing it) can hold it up
                stored_since[ref] = time.monotonic()

        rows = self.config.rollout_fragment_length * self.config.num_envs_per_worker
        held: list = []  # samplers the rate limiter holds until the learner catches up

        def request(handle):
            if self.limiter is not None and not self.limiter.try_insert(rows):
                held.append(handle)
                return
            kwargs = workers.sample_kwargs(handle)  # weights deferred by a learner apart
            sample = handle.call("sample", **kwargs, direct=direct, keep=by_reference)
            if direct:
                in_flight[sample] = (handle, None, "sample")
            else:
                add(handle, sample)

        for handle in handles * self.config.num_async:
            request(handle)
        while not self.stopping.is_set():
            for handle in [held.pop(0) for _ in range(len(held))]:
                request(handle)  # held again if the learner is still behind
            if not in_flight:
                time.sleep(0.01)
                continue
            wait_s = 0.02 if held else 0.5
            done, _ = engine.wait(list(in_flight), timeout=wait_s, return_when="FIRST_COMPLETED")
            for ref in done:
                handle, shard, stage = in_flight.pop(ref)
                stored_since.pop(ref, None)
                if stage == "sample" and ref.exception() is None:
                    # The next sample once it is stored; the shard fetches a kept one.
                    add(handle, ref if by_reference else ref.result(), direct=True)
                    continue
                if stage == "add":
                    adding[shard] -= 1
                workers.note_sampled(handle)
                if ref in freed:
                    freed.discard(ref)  # its slot went on already
                else:
                    request(handle)
                metrics = _unless_lost(
                    ref, handle, *([self.shards[shard]] if stage == "add" else [])
                )
                if metrics is None:
                    continue  # lost with a worker; its replacement call is on its way
                workers.note_observation_stats(metrics)
                ctx.counters[STEPS_SAMPLED] += int(metrics["env_steps"])
                if handle in self.reporting:
                    ctx.add_episodes(metrics)
                self.after_stored(ctx)
                yield metrics
            stuck_before = time.monotonic() - STORE_STUCK_S
            for ref in [r for r, at in stored_since.items() if at < stuck_before]:
                del stored_since[ref]
                freed.add(ref)
                request(in_flight[ref][0])

    def _replay(self, workers):
        """Prioritized batches from the shards, ``num_async`` requests in flight each."""
        engine, size = workers.engine, self.config.train_batch_size
        rows = size * self.config.replay_batches_per_call
        direct = workers.direct_calls
        in_flight = {
            s.call("sample", rows, direct=direct): s for s in self.shards * self.config.num_async
        }
        updates = 0
        while not self.stopping.is_set():
            done, _ = engine.wait(list(in_flight), timeout=1.0, return_when="FIRST_COMPLETED")
            for ref in done:
                shard = in_flight.pop(ref)
                in_flight[shard.call("sample", rows, direct=direct)] = shard
                batches = _unless_lost(ref, shard)
                if batches is None:
                    yield None
                    continue
                for start in range(0, len(batches), size):
                    if not self._may_replay(size):
                        return
                    updates += 1
                    if updates % self.config.weight_sync_every == 0:
                        workers.sync_weights()
                    yield shard, batches[start : start + size]

    def _replay_apart(self, workers, learner):
        """Groups of prioritized batches from the shards to the learner, by reference:
        each shard's answer stays on its worker and the learner's worker fetches it.
        A shard is asked again once the learner has learned on its group, so that
        ``num_async`` groups per shard are on their way or waiting for the learner,
        no more: the rate limiter counts a group as replayed once it is handed on.
        Yields ``(shard, the learner's reply)``."""
        engine = workers.engine
        rows = self.config.train_batch_size * self.config.replay_batches_per_call

        def ask(shard):
            samples[shard.call("sample", rows, direct=True, keep=True)] = shard

        samples: dict = {}  # kept sample call -> its shard
        learning: dict = {}  # learn call -> (its shard, the kept group it learns on)
        for shard in self.shards * self.config.num_async:
            ask(shard)
        while not self.stopping.is_set():
            pending = [*samples, *learning]
            done, _ = engine.wait(pending, timeout=1.0, return_when="FIRST_COMPLETED")
            for ref in sorted(done, key=pending.index):
                if ref in samples:
                    shard = samples.pop(ref)
                    error = ref.exception()
                    if error is not None:
                        if not isinstance(error, WorkerLostError) or not shard.alive:
                            raise error
                        ask(shard)  # a re-created shard starts empty
                        continue
                    if not self._may_replay(rows):
                        return
                    learning[learner.handle.call("learn", ref, direct=True)] = (shard, ref)
                    continue
                shard, _ = learning.pop(ref)
                ask(shard)
                reply = learner.receive(ref)  # None if lost with the learner or the shard
                yield None if reply is None else (shard, reply)

    def _may_replay(self, rows: int) -> bool:
        """Waits until the rate limiter allows ``rows`` more to be replayed (at once
        without ``training_intensity``); False once the algorithm stops."""
        if self.limiter is None:
            return not self.stopping.is_set()
        while not self.stopping.is_set():
            if self.limiter.wait_to_sample(rows, timeout=0.5):
                return True
        return False

    def send_priorities(self, trained, shard):
        """New priorities go back to their shard, one call per fetched group of batches."""
        batch, info = trained
        priorities = priorities_of(info)
        pending = self.pending_priorities.setdefault(shard, [])
        pending.append((batch["batch_indexes"], priorities))
        if len(pending) >= self.config.replay_batches_per_call:
            del self.pending_priorities[shard]
            indexes, values = (np.concatenate(parts) for parts in zip(*pending, strict=True))
            shard.call("update_priorities", indexes, values, direct=self.direct_priorities)
        return trained

    def stop(self) -> None:
        if self.acting_only:
            return
        if getattr(self, "stopping", None) is not None:
            self.stopping.set()
        if getattr(self, "limiter", None) is not None:
            self.limiter.wake()
        for shard in getattr(self, "shards", []):
            shard.kill(timeout=10)
        super().stop()
