"""A data-parallel learner group: one update spread over ``num_learners`` processes.

Each `Learner` is a stateful worker holding a learning copy of the policy; the
group cuts each batch into shares (`TorchPolicy.data_parallel_unit`), and the
learners average their gradients with a gloo all-reduce
(`hrl_tasks.policies.data_parallel`), so that the update equals the one the
driver's policy would take on the whole batch. The rendezvous goes through the
engine: learner 0 serves a ``TCPStore`` on its worker's host, the driver passes
its address to the others; each learner's connections listen on its own worker's
host (the address its worker listens on: the loopback on an embedded cluster).

The driver's policy stays the one the rollout workers, evaluation and checkpoints
read: `pull_weights` loads the learners' weights into it before each broadcast
(`WorkerSet.sync_weights` calls it), `pull_state` their whole state before a
checkpoint, `push_state` a restored one back.

A learner that dies mid-update fails the others' all-reduce at once (its
connections close); they roll back to their state before the update. The group
then waits for the engine to re-create the lost learner, loads a survivor's
state into every member, forms again and repeats the update: the result is the
update a group that lost nobody would have made. If every learner was lost,
the group starts again from the driver's copy (the weights of the last
broadcast).

Gloo's connections and the store are plain TCP, unauthenticated: on a cluster that
encrypts its own connections (TLS), a group of several learners forms only with the
run's consent (``learner_group_plaintext``), or under a ``--runner`` whose every
process listens on the run's own interface; either way it warns once per process
(`learner_group_exposure` decides).
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from typing import Any, Literal

import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies.data_parallel import DataParallel, split_rows
from hrl_tasks.rollout.malloc import keep_heap_for_learning
from hrl_tasks.scheduler.errors import WorkerLostError
from hrl_tasks.scheduler.relay import host_of

logger = logging.getLogger(__name__)

MAX_REFORMS = 3
"""Times one update is repeated on a re-formed group before the error is raised."""


PLAINTEXT_EXPOSURE = (
    "gradients and the group's rendezvous travel unencrypted between the learner "
    "processes (gloo over plain TCP, unauthenticated; no code runs from them)"
)
"""What a learner group of several processes sends in the clear."""


class LearnerGroupError(RuntimeError):
    """The learner group could not take an update (the cause is chained)."""


class PlaintextLearnerGroupWarning(UserWarning):
    """A learner group talks in the clear on a cluster that encrypts its connections."""


def learner_group_exposure(
    encrypted: bool, opted_in: bool, runner: bool
) -> Literal["refuse", "warn", "none"]:
    """What a learner group of several processes does about its plaintext channels. Pure.

    Args:
        encrypted: the cluster encrypts its own connections (`Engine.encrypted`).
        opted_in: the run accepts plaintext groups (``learner_group_plaintext``).
        runner: every process of the cluster was started for this run, on the run's
            interface (``--runner``: `Engine.runner`).

    Returns:
        ``"none"`` on a cluster that speaks plain TCP anyway (nothing more is exposed),
        ``"warn"`` with consent or under a runner, ``"refuse"`` otherwise.
    """
    if not encrypted:
        return "none"
    return "warn" if opted_in or runner else "refuse"


@functools.cache
def warn_plaintext_once() -> None:
    """Warns of `PLAINTEXT_EXPOSURE`, the first time in this process."""
    warnings.warn(
        f"learner group on a cluster that encrypts its connections: {PLAINTEXT_EXPOSURE}",
        PlaintextLearnerGroupWarning,
        stacklevel=3,
    )


def admit_plaintext(engine, size: int, opted_in: bool) -> None:
    """Refuses, warns of or lets pass a group of ``size`` learners on ``engine``
    (`learner_group_exposure`; a group of one sends nothing between processes).

    Raises:
        ConfigError: On an encrypted cluster without consent, naming the exposure and
            the opt-in.
    """
    if size < 2:
        return
    decision = learner_group_exposure(engine.encrypted, opted_in, engine.runner is not None)
    if decision == "refuse":
        raise ConfigError(
            f"this cluster encrypts its connections, but in a learner group {PLAINTEXT_EXPOSURE}."
            " To accept that, set learner_group_plaintext=True (on the command line: --set "
            "learner_group_plaintext=true); or learn in the driver with num_learners=0"
        )
    if decision == "warn":
        warn_plaintext_once()


class Learner:
    """A stateful worker: a learning copy of a policy, a member of a learner group.

    Args:
        policy_class, observation_space, action_space, config: build the copy.
        state: its ``get_state()`` to start from.
        num_threads: torch threads of the process (None leaves torch's default).
    """

    def __init__(
        self, policy_class, observation_space, action_space, config, state=None, num_threads=1
    ):
        keep_heap_for_learning()
        if num_threads is not None:
            import torch

            torch.set_num_threads(int(num_threads))
        self.policy = policy_class(observation_space, action_space, config)
        if state is not None:
            self.policy.set_state(state)
        self._store = None
        self.learn_s = 0.0  # in learn_on_batch, all-reduces included
        self.snapshot_s = 0.0  # keeping the state to roll back to

    def serve(self, host: str, world: int) -> int:
        """As the group's rank 0: a store on ``host`` for the rendezvous; returns its port."""
        self.leave()
        self._store, port = DataParallel.serve_store(host, world)
        return port

    def join(
        self, host: str, port: int, rank: int, world: int, local_host: str | None = None
    ) -> None:
        """Joins the group whose store is at ``host:port`` (waits for every member),
        its connections listening on ``local_host`` (its worker's host; default ``host``)."""
        if rank != 0:
            self.leave()
        self.policy.data_parallel = DataParallel(host, port, rank, world, self._store, local_host)

    def leave(self) -> None:
        group = self.policy.data_parallel
        if group is not None:
            group.close()
        self.policy.data_parallel = None
        self._store = None

    def learn(self, shard: SampleBatch, share: slice, total_rows: int, calls: list) -> tuple:
        """``calls`` (queued policy methods) first, then the group's update on ``shard``,
        rows ``share`` of a batch of ``total_rows``. A failure rolls the policy back to
        its state before the update and is raised.

        Returns:
            ``(info, target_due)``: the policy's learner info, and whether its targets
            are due (`TwinQPolicy.target_due`; None for policies without targets).
        """
        self.run(calls)
        group = self.policy.data_parallel
        if group is None:
            raise LearnerGroupError("this learner has not joined a group")
        start = time.perf_counter()
        before = self.policy.learning_snapshot()
        self.snapshot_s += time.perf_counter() - start
        group.set_share(share, total_rows)
        start = time.perf_counter()
        try:
            info = self.policy.learn_on_batch(shard)
        except BaseException:
            self.policy.restore_learning_snapshot(before)
            raise
        finally:
            group.set_share(None, 0)
            self.learn_s += time.perf_counter() - start
        due = getattr(self.policy, "target_due", None)
        return info, (due() if due is not None else None)

    def run(self, calls: list) -> None:
        """Calls ``policy.method(*args)`` for each ``(method, args)``, in order."""
        for method, args in calls:
            getattr(self.policy, method)(*args)

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.policy.get_weights()

    def timings(self) -> dict[str, float]:
        """Seconds in ``learn_on_batch`` (and, of those, in all-reduces) and in keeping
        the state to roll back to, since the last call."""
        group = self.policy.data_parallel
        out = {
            "learn_s": self.learn_s,
            "reduce_s": 0.0 if group is None else group.reduce_s,
            "snapshot_s": self.snapshot_s,
        }
        self.learn_s = self.snapshot_s = 0.0
        if group is not None:
            group.reduce_s = 0.0
        return out

    def get_policy_state(self) -> dict[str, Any]:
        return self.policy.get_state()

    def load_policy_state(self, state: dict[str, Any]) -> None:
        self.policy.set_state(state)


class LearnerGroup:
    """``num_learners`` `Learner` workers that learn as one (see the module).

    Takes the place of the driver's policy where a plan learns: `learn_on_batch`,
    `target_due`, `update_target`.

    Args:
        engine: the engine (a Dask one: the learners are processes).
        policy: the driver's policy; the learners start from its state.
        num_learners: members of the group.
        resources: what each learner holds (e.g. ``{"GPU": 1}``).
        max_restarts: re-creations of each learner after its worker died.
        num_threads: torch threads of each learner's process.
        plaintext: the run accepts a group in the clear on a cluster that encrypts its
            connections (`admit_plaintext`).

    Raises:
        ConfigError: Before any learner starts, on such a cluster without ``plaintext``.
    """

    def __init__(
        self,
        engine,
        policy,
        num_learners: int,
        resources=None,
        max_restarts=3,
        num_threads=1,
        plaintext: bool = False,
    ):
        self.engine, self.policy, self.size = engine, policy, int(num_learners)
        if self.size < 1:
            raise ValueError(f"a learner group needs num_learners >= 1, got {num_learners!r}")
        admit_plaintext(engine, self.size, plaintext)
        args = (
            type(policy),
            policy.observation_space,
            policy.action_space,
            policy.config,
            policy.get_state(),
            num_threads,
        )
        self.handles = []
        try:
            for rank in range(self.size):
                self.handles.append(
                    engine.create_worker(
                        Learner,
                        *args,
                        resources=resources,
                        name=f"Learner-{rank}",
                        label="Learner",
                        max_restarts=max_restarts,
                    )
                )
            for handle in self.handles:
                handle.ready()
            self._form()
        except BaseException:
            self.stop()
            raise
        self._pending: list = []  # policy calls each learner makes before its next update
        self._target_due = False
        self._fresh = True  # the driver's policy holds the learners' weights
        self.reforms = 0

    def _form(self) -> None:
        """The rendezvous: learner 0 serves the store, every learner joins.

        Raises:
            LearnerGroupError: If two learners share a process (each waits for the
                other's all-reduce in the one thread they share).
        """
        addresses = [handle.address for handle in self.handles]
        if len(set(addresses)) < len(addresses):
            raise LearnerGroupError(
                f"learners share a worker process ({', '.join(addresses)}): give each one a "
                "process of its own with learner_resources, such as {'CPU': 1} on workers "
                "that declare their threads as CPU (the default)"
            )
        host = host_of(addresses[0])
        port = self.handles[0].call("serve", host, self.size, direct=True).result()
        refs = [
            handle.call("join", host, port, rank, self.size, host_of(address), direct=True)
            for rank, (handle, address) in enumerate(zip(self.handles, addresses, strict=True))
        ]
        for ref in refs:
            ref.result()

    def shares(self, n_rows: int) -> list[slice]:
        unit = self.policy.data_parallel_unit()
        if unit is None:
            return [slice(0, n_rows)] * self.size
        return split_rows(n_rows, self.size, unit)

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, Any]:
        """One update of every learner on its share of ``batch``.

        Returns:
            The learners' info: scalars averaged by rows, per-row arrays (such as
            ``td_error``) joined in batch order.

        Raises:
            LearnerGroupError: If the update failed on ``MAX_REFORMS + 1`` groups.
        """
        shares = self.shares(len(batch))
        shards = [batch if s == slice(0, len(batch)) else batch[s] for s in shares]
        for attempt in range(MAX_REFORMS + 1):
            calls, self._pending = self._pending, []
            refs = [
                handle.call("learn", shard, share, len(batch), calls, direct=True)
                for handle, shard, share in zip(self.handles, shards, shares, strict=True)
            ]
            outcomes = [_outcome(ref) for ref in refs]
            errors = [out for out in outcomes if isinstance(out, BaseException)]
            if not errors:
                break
            if attempt == MAX_REFORMS:
                raise LearnerGroupError(
                    f"the learner group failed {attempt + 1} updates in a row"
                ) from errors[0]
            self._reform(outcomes)
        self._fresh = False
        self._target_due = bool(outcomes[0][1])
        return combine_info([out[0] for out in outcomes], [s.stop - s.start for s in shares])

    def _reform(self, outcomes: list) -> None:
        """After a failed update: the lost learners re-created, every learner loaded
        with a survivor's state (or the driver's copy), the group formed again."""
        lost = [isinstance(out, WorkerLostError) for out in outcomes]
        logger.warning(
            "learner group: %d of %d learners lost; forming the group again", sum(lost), self.size
        )
        survivors = [h for h, gone in zip(self.handles, lost, strict=True) if not gone]
        for handle in self.handles:
            handle.ready()
        if survivors:
            state = survivors[0].call("get_policy_state", direct=True).result()
        else:
            state = self.policy.get_state()
        for ref in [h.call("load_policy_state", state, direct=True) for h in self.handles]:
            ref.result()
        self._form()
        self.reforms += 1

    def target_due(self) -> bool:
        """Whether the last update's policy says its targets move now."""
        return self._target_due

    def update_target(self, *args) -> None:
        """Moves the learners' targets (sent with their next call)."""
        self.queue("update_target", *args)

    def queue(self, method: str, *args) -> None:
        """``policy.method(*args)`` on every learner, before its next update."""
        self._pending.append((method, args))

    def pull_weights(self) -> None:
        """The learners' weights into the driver's policy, if they learned since."""
        if not self._fresh:
            self._flush()
            self.policy.set_weights(self.handles[0].call("get_weights", direct=True).result())
            self._fresh = True

    def pull_state(self) -> None:
        """The learners' whole state (optimizer, targets, generator) into the driver's policy."""
        self._flush()
        self.policy.set_state(self.handles[0].call("get_policy_state", direct=True).result())
        self._fresh = True

    def push_state(self) -> None:
        """The driver's policy state (e.g. restored from a checkpoint) into every learner."""
        self._pending = []
        state = self.policy.get_state()
        for ref in [h.call("load_policy_state", state, direct=True) for h in self.handles]:
            ref.result()
        self._fresh = True

    def _flush(self) -> None:
        if self._pending:
            calls, self._pending = self._pending, []
            for ref in [h.call("run", calls, direct=True) for h in self.handles]:
                ref.result()

    def stop(self) -> None:
        for handle in self.handles:
            try:
                handle.kill()
            except Exception:  # the engine is going away: nothing to kill
                logger.debug("learner %s: kill failed", handle.name, exc_info=True)


def _outcome(ref):
    try:
        return ref.result()
    except Exception as exc:  # a lost learner, or a peer's failed all-reduce
        return exc


def combine_info(infos: list[dict], rows: list[int]) -> dict[str, Any]:
    """Learners' info as one: scalars averaged by rows, per-row arrays joined. Pure."""
    total = float(sum(rows))
    out: dict[str, Any] = {}
    for key, first in infos[0].items():
        values = [info[key] for info in infos]
        if np.ndim(first) == 0:
            out[key] = float(sum(float(v) * n for v, n in zip(values, rows, strict=True)) / total)
        else:
            out[key] = np.concatenate([np.asarray(v) for v in values])
    return out
