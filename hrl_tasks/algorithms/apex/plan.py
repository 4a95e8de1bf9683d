"""Ape-X's plan (Horgan et al. 2018): rollout workers with their own epsilons write to
replay shards asynchronously; the learner reads from the shards and sends priorities
back. Two sub-flows run concurrently, as in RLlib Flow; only the learner's is reported.
Episode returns are those of the third of the workers with the lowest epsilons."""

import itertools
import threading
import time

import numpy as np

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.apex.config import ApeXConfig
from hrl_tasks.algorithms.apex.replay_shard import ReplayShard
from hrl_tasks.data.rate_limiter import BlockingLimiter, SampleToInsertRatio
from hrl_tasks.flow import (
    Concurrently,
    LocalIterator,
    SetEpsilon,
    StandardMetricsReporting,
    TrainOneStep,
    UpdateTargetNetwork,
)
from hrl_tasks.flow.context import STEPS_SAMPLED
from hrl_tasks.policies.dqn import DQNConfig as DQNPolicyConfig
from hrl_tasks.policies.dqn import DQNPolicy
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


def per_worker_epsilons(n: int) -> list[float]:
    """Ape-X's fixed exploration: worker i of n gets 0.4 ** (1 + 7 i / (n - 1))."""
    if n == 1:
        return [0.4]
    return [0.4 ** (1 + 7 * i / (n - 1)) for i in range(n)]


class ApeX(Algorithm):
    """Distributed prioritized experience replay (Horgan et al. 2018)."""

    name = "apex"
    policy_class = DQNPolicy
    policy_config_class = DQNPolicyConfig
    config_class = ApeXConfig
    # A replay shard shares a worker process with a rollout worker; with one thread
    # its calls queued behind sampling and the learner got about 30 batches/s. The
    # shards are spread over the processes: packed into one, they left that process
    # with 8.6 CPU-s against 4.9 in 15 s, and sampling about a sixth slower.
    threads_per_worker = 2

    def build_plan(self, workers, ctx):
        cfg = self.config
        self.stopping = threading.Event()  # ends the two sub-flows' threads at stop()
        self.limiter = self._make_limiter()
        self.pending_priorities = {}  # shard -> [(indexes, priorities)] not sent yet
        self.direct_priorities = workers.direct_calls
        self.shards = [
            workers.engine.create_worker(
                ReplayShard,
                cfg.buffer_size // cfg.num_replay_shards,
                cfg.prioritized_alpha,
                cfg.prioritized_beta,
                cfg.learning_starts // cfg.num_replay_shards,
                None if cfg.seed is None else cfg.seed + i,
                name=f"ReplayShard-{i}",
                label="ReplayShard",
                strategy="spread",
                max_restarts=cfg.max_restarts,
            )  # fmt: skip
            for i in range(cfg.num_replay_shards)
        ]
        handles = list(workers.remote_workers)
        for handle, epsilon in zip(handles, per_worker_epsilons(len(handles)), strict=True):
            workers.set_worker_setup(handle, SetEpsilon(epsilon))  # again after a restart
        # As RLlib's Ape-X: episode metrics come from the third of the workers with the
        # lowest epsilons (at least one); a worker acting 40% at random cannot show
        # what the policy has learned. Every worker's steps count.
        self.reporting = set(handles[-max(1, len(handles) // 3) :])
        store_op = LocalIterator(self._store(workers, ctx, handles), "StoreToReplayShards")
        train = TrainOneStep(workers, ctx, sync_weights=False)
        target = UpdateTargetNetwork(workers, ctx, cfg.target_update_every)
        replay_op = LocalIterator(self._replay(workers), "ReplayFromShards").for_each(
            lambda item: item and target(self._send_priorities(train(item[1]), item[0]))
        )
        train_op = Concurrently([store_op, replay_op], mode="async", output_indexes=[1])
        return StandardMetricsReporting(train_op, ctx, cfg.min_steps_per_report, workers.engine)

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

    def _store(self, workers, ctx, handles):
        """Samples go from each rollout worker to a shard; only metrics come here.

        With direct calls a batch passes through the driver (a direct call's result
        lives there): a sample call and then an ``add_sample`` call, each a message
        each way. Otherwise the sample's TaskRef goes to the shard's call and Dask
        moves the batch worker to worker, at the cost of two scheduled tasks.
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
            if how:  # the batch is in hand: only the shard can hold it up
                stored_since[ref] = time.monotonic()

        rows = self.config.rollout_fragment_length * self.config.num_envs_per_worker
        held: list = []  # samplers the rate limiter holds until the learner catches up

        def request(handle):
            if self.limiter is not None and not self.limiter.try_insert(rows):
                held.append(handle)
                return
            sample = handle.call("sample", direct=direct)
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
                    add(handle, ref.result(), direct=True)  # the next sample once it is stored
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
                ctx.counters[STEPS_SAMPLED] += int(metrics["env_steps"])
                if handle in self.reporting:
                    ctx.add_episodes(metrics)
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

    def _may_replay(self, rows: int) -> bool:
        """Waits until the rate limiter allows ``rows`` more to be replayed (at once
        without ``training_intensity``); False once the algorithm stops."""
        if self.limiter is None:
            return not self.stopping.is_set()
        while not self.stopping.is_set():
            if self.limiter.wait_to_sample(rows, timeout=0.5):
                return True
        return False

    def _send_priorities(self, trained, shard):
        """New priorities go back to their shard, one call per fetched group of batches."""
        batch, info = trained
        priorities = np.abs(np.asarray(info["td_error"], dtype=np.float64)) + 1e-6
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
        self.stopping.set()
        if getattr(self, "limiter", None) is not None:
            self.limiter.wake()
        for shard in getattr(self, "shards", []):
            shard.kill(timeout=10)
        super().stop()
