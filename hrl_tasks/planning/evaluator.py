"""Leaf evaluation for searches running at once: one network, one forward pass per batch.

`BatchingEvaluator` holds a policy-value network and answers ``predict`` calls
from many threads (the searches of the tasks running in its process, or calls
to it as a stateful worker). While one forward pass runs, new requests queue;
when it ends, one waiting caller takes every queued request and runs them as
one batch. No timer: a lone caller is served at once, many callers batch
themselves. With ``cache_size`` it also keeps the answers for the positions it
saw last (a transposition cache: the same position reached by another move
order, or searched again by the next move's search, costs no forward pass).

What a search task needs to evaluate leaves travels as a small picklable spec,
resolved where the task runs:

* `NetworkLeaves` - the network in this process (`worker_local`: one stateful
  evaluator per worker process, shared by the tasks running there), loaded
  once per weights version;
* `RolloutLeaves` - UCT's random rollouts, no network.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from hrl_tasks.planning.game import Game
from hrl_tasks.planning.mcts import Evaluate, NetworkEvaluator, RolloutEvaluator
from hrl_tasks.policies.policy_value import PolicyValueSpec


class BatchingEvaluator:
    """A policy-value network serving concurrent ``predict`` calls in batches.

    Args:
        spec: The network to build.
        weights: Its weights (``get_weights()`` of a trained one).
        version: A label of the weights; `load` with another version replaces them.
        max_batch: Rows per forward pass at most.
        threads: Torch threads for the forward passes.
        cache_size: Positions whose answers are kept for the weights of this
            version, the oldest dropped first (0: none).
    """

    thread_safe = True  # calls to it as a stateful worker run at once, to batch

    def __init__(
        self,
        spec: PolicyValueSpec,
        weights: dict[str, np.ndarray] | None = None,
        version: Any = None,
        max_batch: int = 256,
        threads: int = 1,
        cache_size: int = 0,
    ):
        import torch

        torch.set_num_threads(threads)
        self.net = spec.build()
        self.version = None
        self.max_batch = max_batch
        self.cond = threading.Condition()
        self.queue: list[_Request] = []
        self.running = False
        self.batch_rows: Counter[int] = Counter()
        self.batch_requests: Counter[int] = Counter()
        self.cache_size = cache_size
        self.cache: dict[bytes, tuple[np.ndarray, float]] = {}
        self.cache_hits = self.cache_misses = 0
        if weights is not None:
            self.load(weights, version)

    def load(self, weights: dict[str, np.ndarray], version: Any = None) -> None:
        """Replaces the weights (after the forward pass running now)."""
        with self.cond:
            while self.running:
                self.cond.wait()
            self.net.set_weights(weights)
            self.version = version
            self.cache.clear()

    def predict(self, observations: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(logits, values)`` for a batch of observations, batched with other callers'
        (positions in the cache are answered from it)."""
        observations = np.asarray(observations, dtype=np.float32)
        if not self.cache_size:
            return self._predict(observations, masks)
        keys = [row.tobytes() for row in observations]
        with self.cond:
            version = self.version
            found = [self.cache.get(key) for key in keys]
        missing: dict[bytes, int] = {}  # each position asked of the network once
        for i, (key, answer) in enumerate(zip(keys, found, strict=True)):
            if answer is None:
                missing.setdefault(key, i)
        if missing:
            rows = list(missing.values())
            logits, values = self._predict(
                observations[rows], None if masks is None else np.asarray(masks)[rows]
            )
            with self.cond:
                for row, key in enumerate(missing):
                    missing[key] = (logits[row], values[row])
                    if self.version == version:  # not an answer of weights since replaced
                        self._remember(key, missing[key])
            found = [
                missing[key] if answer is None else answer
                for key, answer in zip(keys, found, strict=True)
            ]
        with self.cond:
            self.cache_misses += len(missing)
            self.cache_hits += len(keys) - len(missing)
        return np.stack([f[0] for f in found]), np.array([f[1] for f in found])

    def _remember(self, key: bytes, answer: tuple[np.ndarray, float]) -> None:
        if len(self.cache) >= self.cache_size:
            del self.cache[next(iter(self.cache))]  # the oldest
        self.cache[key] = answer

    def _predict(
        self, observations: np.ndarray, masks: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        request = _Request(observations, masks)
        with self.cond:
            self.queue.append(request)
            while request.result is None and request.error is None:
                if self.running:
                    self.cond.wait()
                    continue
                batch = self._take()
                self.running = True
                self.cond.release()
                try:
                    self._run(batch)
                finally:
                    self.cond.acquire()
                    self.running = False
                    self.cond.notify_all()
        if request.error is not None:
            raise request.error
        return request.result

    def stats(self) -> dict[str, Any]:
        """How many forward passes had each number of rows, and of requests; and the
        positions answered from the cache (``cache_hits``) and by the network."""
        with self.cond:
            return {
                "rows": dict(self.batch_rows),
                "requests": dict(self.batch_requests),
                "cache_hits": self.cache_hits,
                "cache_misses": self.cache_misses,
            }

    def _take(self) -> list[_Request]:
        batch, rows = [], 0
        while self.queue and (
            not batch or rows + len(self.queue[0].observations) <= self.max_batch
        ):
            request = self.queue.pop(0)
            batch.append(request)
            rows += len(request.observations)
        return batch

    def _run(self, batch: list[_Request]) -> None:
        try:
            observations = np.concatenate([r.observations for r in batch])
            logits, values = self.net.predict(observations, None)
        except BaseException as exc:  # every waiting caller learns of it
            for request in batch:
                request.error = exc
            raise
        start = 0
        for request in batch:
            end = start + len(request.observations)
            request.result = (logits[start:end], values[start:end])
            start = end
        self.batch_rows[len(observations)] += 1
        self.batch_requests[len(batch)] += 1


class _Request:
    __slots__ = ("observations", "masks", "result", "error")

    def __init__(self, observations: np.ndarray, masks: np.ndarray):
        self.observations, self.masks = observations, masks
        self.result: tuple[np.ndarray, np.ndarray] | None = None
        self.error: BaseException | None = None


# --- what a search task resolves -------------------------------------------------


@dataclass(frozen=True)
class RolloutLeaves:
    """UCT's leaf values: random rollouts (priors uniform). Needs no weights."""

    rollouts: int = 1

    def resolve(self, game: Game, rng: np.random.Generator, weights: Any = None) -> Evaluate:
        return RolloutEvaluator(game, rng, self.rollouts)


@dataclass(frozen=True)
class NetworkLeaves:
    """The network in the process where the search runs: one `BatchingEvaluator` per
    process (per engine in the driver), shared by the searches running there and
    loaded with ``weights`` when its version is not ``version``."""

    spec: PolicyValueSpec
    version: Any = 0
    cache_size: int = 0  # positions the process's evaluator keeps answers for

    def resolve(self, game: Game, rng: np.random.Generator, weights: Any = None) -> Evaluate:
        return NetworkEvaluator(game, self.evaluator(weights).predict)

    def evaluator(self, weights: Any = None) -> BatchingEvaluator:
        """This process's evaluator, holding this version's weights.

        Raises:
            ValueError: if it holds another version and ``weights`` is None.
        """
        from hrl_tasks.scheduler import worker_local

        key = ("hrl_tasks.planning.evaluator", self.spec, self.cache_size)
        evaluator = worker_local(
            key, lambda: BatchingEvaluator(self.spec, cache_size=self.cache_size)
        )
        if evaluator.version != self.version:
            if weights is None:
                raise ValueError(f"no weights of version {self.version!r} for the evaluator")
            if callable(getattr(weights, "result", None)):  # a TaskRef in the caller's process
                weights = weights.result()
            evaluator.load(weights, self.version)
        return evaluator
