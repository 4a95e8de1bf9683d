"""A learner in a process of its own, fed by the rollout workers without the driver.

IMPALA's and APPO's data path (`AsyncLearner`), as in their papers and in Sample
Factory: each rollout worker's batch stays on its worker (a kept direct call, see
`WorkerHandle.call`), the driver passes only its TaskRef to the learner's `add`,
and the learner's worker fetches the batch from the rollout worker's. The learner
trains in a thread of its own as batches arrive. Every ``broadcast_interval``
updates, the reply to an `add` carries its weights, which the driver hands to each
rollout worker's next ``sample`` call (one upload, as `WorkerSet.sync_weights`
does). Measured, that beat weights kept on the learner's worker and fetched from
there: they reached the samplers two to four batches later, and IMPALA needed up to
three times the env steps to learn CartPole (docs/benchmarks.md, 2026-11-29). No
batch passes through the driver's process; the weights do, as they always have.

A3C's (`GradientLearner`): each rollout worker's gradients stay on its worker, the
learner fetches them from there, applies them, and its reply carries the new
weights, which the driver hands to that worker's next ``sample`` call only.

Recovery: the engine re-creates a learner whose process died, from its last
state the driver noted (`RemoteLearner` asks for it every ``SNAPSHOT_EVERY_S``,
between updates, and gives it to ``rebuild_with``): the run goes on from there,
losing the updates since and the batches in flight. Rollout workers then act
with the weights of that state until the new learner's first broadcast.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import Any

from hrl_tasks.data import SampleBatch
from hrl_tasks.rollout.malloc import keep_heap_for_learning
from hrl_tasks.scheduler.errors import WorkerLostError

logger = logging.getLogger(__name__)

POLL_S = 0.1
ADDS_IN_FLIGHT = 1
"""`add` calls on their way while the driver goes on (more wait for the oldest):
batches wait in the learner's queue, not in calls on their way to it, so the
learner learns on batches at most ``queue_size`` + this behind."""
SNAPSHOT_EVERY_S = 2.0
"""How often the driver asks the learner for its state, for re-creating it."""


class AsyncLearnerError(RuntimeError):
    """The learner's thread failed (the cause is chained)."""


class LearnerWorker:
    """What the driver reads of a learner worker (`RemoteLearner`): weights and state.
    A learner worker sets ``policy`` and ``lock``, and takes the driver's items with
    methods of its own (`AsyncLearner.add`)."""

    policy: Any
    lock: threading.Lock

    def weights(self) -> dict:
        """The policy's weights."""
        with self.lock:
            return self.policy.get_weights()

    def policy_state(self) -> dict[str, Any]:
        with self.lock:
            return self.policy.get_state()

    def load_policy_state(self, state: dict[str, Any]) -> None:
        with self.lock:
            self.policy.set_state(state)

    def close(self) -> None:
        """Nothing runs beside the calls."""


def build_learner_policy(policy_class, observation_space, action_space, config, state, num_threads):
    """A learner worker's policy, from ``state`` if given, on ``num_threads`` torch threads."""
    keep_heap_for_learning()
    import torch

    torch.set_num_threads(int(num_threads))
    policy = policy_class(observation_space, action_space, config)
    if state is not None:
        policy.set_state(state)
    return policy


def update_observation_stats(policy, stats: list) -> None:
    """After the update: it learned with the statistics it sampled with."""
    if stats:
        from hrl_tasks.data.running_stats import RunningStats

        for state in stats:
            policy.update_observation_stats(RunningStats.from_state(state))


class AsyncLearner(LearnerWorker):
    """A stateful worker: a policy that learns, in a thread of its own, on the batches given to `add`.

    Args:
        policy_class, observation_space, action_space, config: build the policy.
        state: its ``get_state()`` to start from.
        train_batch_size: env steps per update (batches are concatenated to at least this).
        queue_size: batches waiting for the learning thread; `add` waits while it is full.
        num_threads: torch threads of the process.
        broadcast_interval: updates between two replies that carry the weights.
    """

    def __init__(
        self,
        policy_class,
        observation_space,
        action_space,
        config,
        state=None,
        train_batch_size: int = 256,
        queue_size: int = 4,
        num_threads: int = 1,
        broadcast_interval: int = 1,
    ):
        self.policy = build_learner_policy(
            policy_class, observation_space, action_space, config, state, num_threads
        )
        self.train_batch_size = int(train_batch_size)
        self.inbox: queue.Queue = queue.Queue(int(queue_size))
        self.lock = threading.Lock()  # the policy and the counters
        self.version = 0  # updates taken
        self.sent_version = 0  # the version whose weights the last reply carried
        self.broadcast_interval = int(broadcast_interval)
        self.unreported = {"trained": 0, "updates": 0, "learn_s": 0.0}
        self.info: dict[str, float] = {}
        self.error: BaseException | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._learn, name="async-learner", daemon=True)
        self.thread.start()

    def add(self, sample: tuple[SampleBatch, dict]) -> dict[str, Any]:
        """Queue a rollout worker's ``(batch, metrics)`` for learning; waits while the
        queue is full.

        Returns:
            What the driver counts: ``sampled`` (the batch's env steps), ``metrics``
            (the sample's, without arrays), and since the last reply ``trained``
            (env steps), ``updates`` and ``learn_s``; ``version`` (updates taken in
            all), ``info`` (the latest update's scalars) and ``queued``; and
            ``weights`` once ``broadcast_interval`` updates were taken since the last
            reply that carried them.

        Raises:
            AsyncLearnerError: If the learning thread failed.
        """
        batch, metrics = sample
        while True:
            self._check()
            try:
                self.inbox.put((batch, metrics.pop("obs_stats", None)), timeout=POLL_S)
                break
            except queue.Full:
                continue
        with self.lock:
            reply = {
                "sampled": batch.env_steps(),
                "metrics": metrics,
                **self.unreported,
                "version": self.version,
                "info": dict(self.info),
                "queued": self.inbox.qsize(),
            }
            self.unreported = {"trained": 0, "updates": 0, "learn_s": 0.0}
            if self.version >= self.sent_version + self.broadcast_interval:
                reply["weights"] = self.policy.get_weights()
                self.sent_version = self.version
        return reply

    def _learn(self) -> None:
        pending: list[SampleBatch] = []
        stats: list = []
        try:
            while not self.stopped.is_set():
                try:
                    batch, obs_stats = self.inbox.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                pending.append(batch)
                if obs_stats is not None:
                    stats.append(obs_stats)
                if sum(b.env_steps() for b in pending) >= self.train_batch_size:
                    self._update(pending, stats)
                    pending, stats = [], []
        except BaseException as exc:  # raised in the next add()
            self.error = exc

    def _update(self, batches: list[SampleBatch], stats: list) -> None:
        batch = SampleBatch.concat_samples(batches)
        with self.lock:
            start = time.perf_counter()
            info = self.policy.learn_on_batch(batch)
            update_observation_stats(self.policy, stats)
            self.unreported["learn_s"] += time.perf_counter() - start
            self.unreported["trained"] += batch.env_steps()
            self.unreported["updates"] += 1
            self.version += 1
            self.info = {k: float(v) for k, v in info.items() if getattr(v, "ndim", 0) == 0}

    def _check(self) -> None:
        if self.error is not None:
            raise AsyncLearnerError(f"the learner's thread failed: {self.error!r}") from self.error

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)


class GradientLearner(LearnerWorker):
    """A stateful worker: a policy that applies the gradients given to `add` (A3C's
    learner), one set per call, as they come.

    Args:
        policy_class, observation_space, action_space, config: build the policy.
        state: its ``get_state()`` to start from.
        num_threads: torch threads of the process.
    """

    def __init__(
        self, policy_class, observation_space, action_space, config, state=None, num_threads=1
    ):
        self.policy = build_learner_policy(
            policy_class, observation_space, action_space, config, state, num_threads
        )
        self.lock = threading.Lock()
        self.version = 0  # gradient sets applied

    def add(self, item: tuple) -> dict[str, Any]:
        """Apply a rollout worker's ``(grads, info, env_steps, metrics)`` (`ComputeGradients`).

        Returns:
            As `AsyncLearner.add`'s reply, with the new ``weights`` every time: they go
            back to the worker the gradients came from.
        """
        grads, info, steps, metrics = item
        stats = metrics.pop("obs_stats", None)
        with self.lock:
            start = time.perf_counter()
            self.policy.apply_gradients(grads)
            update_observation_stats(self.policy, [] if stats is None else [stats])
            self.version += 1
            return {
                "sampled": int(steps),
                "metrics": metrics,
                "trained": int(steps),
                "updates": 1,
                "learn_s": time.perf_counter() - start,
                "version": self.version,
                "info": {k: float(v) for k, v in info.items() if getattr(v, "ndim", 0) == 0},
                "queued": 0,
                "weights": self.policy.get_weights(),
            }


class RemoteLearner:
    """The driver's side of a learner worker (`AsyncLearner`, `GradientLearner`): feeds
    it references, counts its replies, hands the weights they carry to the rollout
    workers, and keeps its state for re-creating it.

    Takes the place of a `LearnerGroup` in ``WorkerSet.learner_group`` for what the
    driver reads (`pull_weights`, `pull_state`, `push_state`, `stop`).

    Args:
        workers: the ``WorkerSet`` (its local policy: the learner's first state,
            and the copy evaluation and checkpoints read).
        learner_class: the stateful worker's class.
        to_source: the weights a reply carries go to the worker whose item it was
            (A3C), not to every rollout worker.
        resources, max_restarts: of the learner's stateful worker.
        options: the learner's other arguments (e.g. `AsyncLearner`'s
            ``train_batch_size``, ``queue_size``, ``broadcast_interval``, ``num_threads``).
    """

    def __init__(
        self,
        workers,
        learner_class=AsyncLearner,
        *,
        to_source: bool = False,
        resources=None,
        max_restarts: int = 3,
        **options,
    ):
        self.workers, self.engine = workers, workers.engine
        self.policy = workers.local_worker.policy
        self.to_source = to_source
        policy = self.policy
        self.handle = self.engine.create_worker(
            learner_class,
            type(policy),
            policy.observation_space,
            policy.action_space,
            policy.config,
            state=policy.get_state(),
            **options,
            resources=resources,
            name=learner_class.__name__,
            label="Learner",
            max_restarts=max_restarts,
        )
        self.handle.ready()
        self.in_flight: collections.deque = collections.deque()  # (add call, source)
        self.kept_state: dict | None = None  # what a re-created learner starts from
        self.snapshot_ref = None
        self.snapshot_at = time.monotonic()
        self.restarts = 0
        self.fresh = True  # the driver's policy holds the learner's weights

    def add(self, item_ref, source=None) -> list[dict]:
        """Hands a kept item's TaskRef (a sample, or gradients) from the rollout worker
        ``source`` to the learner; returns the replies that came (waiting for the
        oldest while more than ``ADDS_IN_FLIGHT`` are out). A reply lost with the
        learner or with the item's worker is dropped: those steps are not trained.

        Raises:
            AsyncLearnerError: If the learner's thread failed."""
        self.in_flight.append((self.handle.call("add", item_ref, direct=True), source))
        replies, carried = [], []
        while self.in_flight and (
            self.in_flight[0][0].done() or len(self.in_flight) > ADDS_IN_FLIGHT
        ):
            ref, from_worker = self.in_flight.popleft()
            reply = self._reply(ref)
            if reply is not None:
                replies.append(reply)
                if "weights" in reply:
                    carried.append((reply.pop("weights"), from_worker))
        self._broadcast(carried)
        self._snapshot()
        return replies

    @classmethod
    def of_config(cls, workers, config, learner_class, to_source=False, **options):
        """A learner worker as an algorithm's ``config`` asks: its ``learner_resources``
        (None: ``{"CPU": 1}``), ``max_restarts`` and ``learner_threads`` (None: 1)."""
        return cls(
            workers,
            learner_class,
            to_source=to_source,
            resources=config.learner_resources or {"CPU": 1},
            max_restarts=config.max_restarts,
            num_threads=config.learner_threads or 1,
            **options,
        )

    def receive(self, ref, source=None) -> dict | None:
        """The reply of a finished call to the learner (None if lost with a worker);
        the weights it carries go on as `add`'s do (to ``source`` with ``to_source``)."""
        reply = self._reply(ref)
        if reply is not None and "weights" in reply:
            self._broadcast([(reply.pop("weights"), source)])
        self._snapshot()
        return reply

    def _reply(self, ref) -> dict | None:
        try:
            reply = ref.result()
        except WorkerLostError:
            self._after_loss()
            return None
        self.fresh = False
        return reply

    def _after_loss(self) -> None:
        """An add failed as lost: the sample's worker died, or the learner did. If the
        learner was re-created, the rollout workers go back to the state it has."""
        restarts = self.handle.restarts
        if restarts == self.restarts:
            return
        self.restarts = restarts
        logger.warning("the learner's process was lost; it goes on from its last state")
        if self.kept_state is not None:
            self.policy.set_state(self.kept_state)
        self.workers.sync_weights(weights=self.policy.get_weights(), defer=True)

    def _broadcast(self, carried: list[tuple[dict, Any]]) -> None:
        """The newest weights the replies carried, to every rollout worker's next sample
        call; with ``to_source``, each reply's to its item's worker's only."""
        if not carried:
            return
        if self.to_source:
            for weights, source in carried:
                self.workers.sync_weights(weights=weights, to=[source], defer=True)
        else:
            self.workers.sync_weights(weights=carried[-1][0], defer=True)
        self.fresh = True

    def _snapshot(self) -> None:
        """Every ``SNAPSHOT_EVERY_S``, the learner's state into what a re-created
        learner starts from (asked for without waiting, taken once answered)."""
        ref = self.snapshot_ref
        if ref is None:
            if time.monotonic() - self.snapshot_at >= SNAPSHOT_EVERY_S:
                self.snapshot_ref = self.handle.call("policy_state", direct=True)
            return
        if not ref.done():
            return
        self.snapshot_ref, self.snapshot_at = None, time.monotonic()
        if ref.exception() is None:
            self._keep_state(ref.result())

    def _keep_state(self, state: dict[str, Any]) -> None:
        self.kept_state = state
        self.handle.rebuild_with(state=state)

    # --- what the driver reads (as of a LearnerGroup) --------------------------------

    def pull_weights(self) -> None:
        """The learner's latest weights into the driver's policy."""
        if not self.fresh:
            self.policy.set_weights(self.handle.call("weights", direct=True).result())
            self.fresh = True

    def pull_state(self) -> None:
        """The learner's whole state into the driver's policy (before a checkpoint)."""
        state = self.handle.call("policy_state", direct=True).result()
        self.policy.set_state(state)
        self._keep_state(state)

    def push_state(self) -> None:
        """The driver's policy state (restored from a checkpoint) into the learner."""
        state = self.policy.get_state()
        self.handle.call("load_policy_state", state, direct=True).result()
        self.handle.rebuild_with(state=state)

    def queue(self, method: str, *args) -> None:
        """Observation statistics reach the learner with the samples: nothing to queue."""

    def stop(self) -> None:
        try:
            self.handle.kill()
        except Exception:  # the engine is going away: nothing to kill
            logger.debug("learner %s: kill failed", self.handle.name, exc_info=True)
