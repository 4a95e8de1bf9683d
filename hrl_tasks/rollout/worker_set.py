"""`WorkerSet`: a local rollout worker plus remote ones, kept on the same weights.

Usage, one synchronous iteration::

    workers = WorkerSet(engine, "CartPole-v1", policy, num_workers=4, seed=0)
    refs = workers.sample()                       # one TaskRef per remote worker
    batches = [batch for batch, _ in engine.gather(refs)]
    workers.local_worker.learn_on_batch(SampleBatch.concat_samples(batches))
    workers.sync_weights()                        # one broadcast
    workers.stop()

One broadcast per update: `sync_weights` puts the weights in the cluster once,
as the result of one small task, and passes that single TaskRef to every
remote worker's ``set_weights`` call (a single target gets them in its call). A TaskRef argument is a dependency, so
each worker fetches the weights from where they are (worker to worker); the
driver sends them once, not once per worker. Calls to one worker run in the
order they were made, so a ``sample`` made after `sync_weights` uses the new
weights without waiting for them on the driver. With ``sync_weights(defer=True)``
the weights ride on each worker's next ``sample`` call instead (made through
`sample` or a ``ParallelRollouts``): one task per worker and update, not two.

Recovery: the engine re-creates a remote worker whose process died, from its
construction arguments, so with the initial weights. The set remembers the
last weights TaskRef and each worker's ``restarts`` count at its last sync
(and re-runs the worker's `set_worker_setup` function, if it has one);
`sample` (or `note_sampled`, for callers that sample through the handles)
re-sends the weights first to a worker whose count grew. A ``sample``
that was running when the worker died fails with ``WorkerLostError`` (the
engine does not re-issue it: it would run on the initial weights); the flow's
``ParallelRollouts`` makes the call again, after the weights, and the
algorithm goes on.

A learner thread and a sampling thread may use one set at once (IMPALA,
Ape-X): the weights and the re-sync bookkeeping are kept under a lock.

With ``direct_calls=True`` every call goes straight to the worker process
instead of through the Dask scheduler (`hrl_tasks.scheduler.worker_objects`), and
the weights of an update go as one ``engine.share``: the first worker's call
carries them and the others fetch them from it, still one upload per update.
A round of ``sample`` calls then goes to each host as one message, through one of
its workers, and comes back as one (`hrl_tasks.scheduler.relay`): the driver's
cost of a round grows with the hosts, not the workers. Should that worker die,
its host-mates' samples of the round are lost too (made again, as a lost
worker's are); a host-mate's death costs only its own.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hrl_tasks.envs.make import EnvLike, resolve_env
from hrl_tasks.policies import Policy
from hrl_tasks.rollout.worker import PolicyFactory, RolloutWorker
from hrl_tasks.scheduler import EngineError, WorkerGroup, WorkerHandle, WorkerLostError


def _identity(value: Any) -> Any:
    return value


class _PolicyCopy:
    """A policy factory giving each remote worker its own copy, even in-process (`SyncEngine`)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def __call__(self, observation_space: Any, action_space: Any) -> Policy:
        return copy.deepcopy(self.policy)


class WorkerSet:
    """Rollout workers for one policy: a local one in the driver and ``num_workers`` remote.

    Args:
        engine: An `Engine` or a `SyncEngine`.
        env: A gymnasium id, a name registered with `register_env` (resolved
            here, so remote processes can build it), an ``EnvSpec`` or a callable.
        policy_factory_or_policy: A `Policy` (the local worker uses this very
            object; remote ones get copies) or ``factory(obs_space, act_space)``.
        num_workers: Remote workers (0: only the local one; use it directly).
        num_envs_per_worker: Sub-envs per worker.
        rollout_fragment_length: Steps per sub-env in one ``sample``.
        seed: Base seed; worker ``i`` (0 local, 1.. remote) derives its own.
        env_config: Keyword arguments for the env.
        resources_per_worker: Held by each remote worker for its life, e.g.
            ``{"CPU": 1}``; None holds nothing.
        remote_policy: What remote workers act with, a `Policy` (each gets a
            copy) or a factory; None: copies of `policy_factory_or_policy`.
            Plans whose remote workers only sample pass
            ``policy.inference_copy()`` (for an MLP actor-critic, a numpy copy:
            no torch in the worker processes); workers that compute
            gradients (A3C) need the full policy.
        direct_calls: Call the remote workers directly, not through the
            scheduler (much less of the driver's time per call; the calls do
            not show in the dashboard's task stream). Ignored, with a
            warning, when this process cannot reach the workers itself
            (`Engine.reaches_workers`).
        max_restarts: Re-creations of each remote worker after its process died.
        max_env_errors: Failures in a row of one sub-env (each followed by
            building it again) before sampling gives up (`RolloutWorker`).
        worker_class: `RolloutWorker`, or `MultiAgentRolloutWorker` (whose
            policy is a `PolicyMap`) for multi-agent envs.
        record_experience: A directory (a path or fsspec URL) where every worker
            writes what it samples as Parquet (`RolloutWorker`); written out as the
            workers stop.
        env_backend: What steps the workers' envs: ``"gymnasium"`` or ``"envpool"``
            (`RolloutWorker`; single-agent envs only).

    Attributes:
        resyncs: How often weights were re-sent to a re-created remote worker.

    Raises:
        UnknownEnvError: If ``env`` is an unknown id.
        ObjectStartError: If a remote worker fails to start.
    """

    def __init__(
        self,
        engine: Any,
        env: EnvLike,
        policy_factory_or_policy: Policy | PolicyFactory,
        num_workers: int,
        num_envs_per_worker: int = 1,
        rollout_fragment_length: int = 128,
        seed: int | None = None,
        env_config: Mapping[str, Any] | None = None,
        resources_per_worker: Mapping[str, float] | None = None,
        remote_policy: Policy | PolicyFactory | None = None,
        direct_calls: bool = False,
        max_restarts: int = 3,
        max_env_errors: int = 3,
        worker_class: type = RolloutWorker,
        record_experience: str | None = None,
        env_backend: str = "gymnasium",
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if env_backend == "gymnasium":
            env = resolve_env(env)
        self.engine = engine
        self.direct_calls = bool(direct_calls) and num_workers > 0 and engine.reaches_workers()
        policy = policy_factory_or_policy
        config = {
            "seed": seed,
            "env_config": None if env_config is None else dict(env_config),
            "max_env_errors": max_env_errors,
        }
        if record_experience is not None:  # every worker writes what it samples
            config["record_experience"] = str(record_experience)
        if env_backend != "gymnasium":
            if worker_class is not RolloutWorker:
                raise ValueError(
                    f"env_backend={env_backend!r} is for single-agent envs; a multi-agent "
                    "env steps on gymnasium's backend (env_backend='gymnasium')"
                )
            config["env_backend"] = env_backend
        local_args = (env, policy, num_envs_per_worker, rollout_fragment_length)
        self._local = worker_class(*local_args, **config, worker_index=0, single_thread=False)
        remote = policy if remote_policy is None else remote_policy
        factory = _PolicyCopy(remote) if isinstance(remote, Policy) else remote
        args = (env, factory, num_envs_per_worker, rollout_fragment_length)
        # One create_worker per member rather than create_group, whose members all get
        # the same arguments: each needs its own worker_index (seeds, episode ids).
        resources = None if resources_per_worker is None else dict(resources_per_worker)
        handles: list = []
        try:
            for i in range(1, num_workers + 1):
                member = {
                    "worker_index": i,
                    "name": f"RolloutWorker-{i}",
                    "label": "RolloutWorker",  # members pool their sample durations
                    "resources": resources,
                    "max_restarts": max_restarts,
                }
                handles.append(engine.create_worker(worker_class, *args, **config, **member))
            for handle in handles:
                handle.ready()
        except BaseException:
            self._kill(handles)
            self._local.close()
            raise
        # Handles of a Dask engine form a group, so speculative samples can go to a peer.
        plain = not handles or not all(isinstance(h, WorkerHandle) for h in handles)
        self._remote: WorkerGroup | list = handles if plain else WorkerGroup(handles)
        self._weights_ref: Any = None
        self._weights: dict[str, np.ndarray] | None = None
        self._synced_restarts = [0] * num_workers
        self._deferred: set[int] = set()  # workers whose next sample carries the weights
        self._setups: dict[int, Callable[[RolloutWorker], Any]] = {}
        self.resyncs = 0
        self._stopped = False
        self._lock = threading.RLock()  # the weights and the re-sync counts
        self._obs_stats: list = []  # observation statistics from samples, not merged yet
        self.learner_group = None  # a LearnerGroup that learns instead of the local policy
        self.sync_weights()

    def note_observation_stats(self, metrics: dict) -> None:
        """Keeps a sample's observation statistics (``metrics["obs_stats"]``, from a
        policy that normalizes observations) for the learner's policy: merged at the
        next `sync_weights`, after the learner used the batch, so that it learns with
        the statistics the batch was sampled with."""
        state = metrics.pop("obs_stats", None)
        if state is not None:
            with self._lock:
                self._obs_stats.append(state)

    def _merge_observation_stats(self) -> None:
        if not self._obs_stats:
            return
        from hrl_tasks.data.running_stats import RunningStats

        merged = functools.reduce(
            RunningStats.merge, (RunningStats.from_state(s) for s in self._obs_stats)
        )
        self._obs_stats.clear()
        self._local.policy.update_observation_stats(merged)
        if self.learner_group is not None:
            self.learner_group.queue("update_observation_stats", merged)

    @property
    def learner(self):
        """What learns: the `LearnerGroup` (``num_learners``), else the local policy.
        Either takes ``learn_on_batch``; policies with targets also ``target_due`` and
        ``update_target``."""
        return self._local.policy if self.learner_group is None else self.learner_group

    def pull_learner_weights(self) -> None:
        """The learner group's latest weights into the local policy (if there is one)."""
        if self.learner_group is not None:
            self.learner_group.pull_weights()

    @property
    def local_worker(self) -> RolloutWorker:
        """The worker in the driver process: evaluation, and the learner's policy holder."""
        return self._local

    @property
    def remote_workers(self) -> WorkerGroup | list:
        """The remote workers' handles (a `WorkerGroup` on a Dask engine)."""
        return self._remote

    def sync_weights(
        self,
        weights: dict[str, np.ndarray] | None = None,
        to: Sequence[Any] | None = None,
        *,
        defer: bool = False,
    ) -> list[Any]:
        """Sends one set of weights to the remote workers, in one broadcast.

        Args:
            weights: The weights to send; they are also loaded into the local
                worker. None sends the local worker's weights.
            to: Handles of the workers to update (e.g. the source of the
                gradients, in A3C); None updates all of them.
            defer: Send nothing now: each target's next ``sample`` call (made
                through `sample` or with `sample_kwargs`, as ``ParallelRollouts``
                does) loads the weights first. Saves a task per worker per
                update when sampling follows every update, as in PPO.

        Returns:
            The TaskRefs of the ``set_weights`` calls (waiting is optional:
            later calls to each worker run after its ``set_weights``); empty
            with ``defer``.

        Raises:
            ValueError: If ``to`` names a handle that is not in this set.
        """
        with self._lock:  # a learner thread and a sampling thread may both get here
            if weights is None:
                self.pull_learner_weights()
            self._merge_observation_stats()
            if weights is None:
                weights = self._local.get_weights()
            else:
                self._local.set_weights(weights)
            self._weights, self._weights_ref = weights, None
            if isinstance(self._remote, WorkerGroup):  # a re-created worker starts with them
                for handle in self._remote:
                    handle.rebuild_with(weights=weights)
            targets = list(enumerate(self._remote)) if to is None else [self._find(h) for h in to]
            if defer:
                self._deferred.update(index for index, _ in targets)
                return []
            self._deferred.difference_update(index for index, _ in targets)
            if not targets:
                return []
            # A single target gets the weights in its call; several share one TaskRef.
            sent = weights if len(targets) == 1 else self._weights_in_cluster()
            refs = []
            for index, handle in targets:
                restarts = handle.restarts  # read first: a later restart is seen
                restarted = restarts != self._synced_restarts[index]
                self._synced_restarts[index] = restarts
                refs.append(handle.call("set_weights", sent, direct=self.direct_calls))
                if restarted and index in self._setups:  # a new incarnation: set it up again
                    handle.call("apply", self._setups[index], direct=self.direct_calls)
                    self.resyncs += 1
            return refs

    def sample(self, speculative: bool = False) -> list[Any]:
        """One ``sample`` call per remote worker, after re-syncing re-created ones.

        Args:
            speculative: Let the engine back a straggling call up on an idle
                peer (an equivalent batch, from another worker's envs).

        Returns:
            TaskRefs of ``(SampleBatch, metrics)`` (see `RolloutWorker.sample`).

        Raises:
            ValueError: If the set has no remote workers.
        """
        if not len(self._remote):
            raise ValueError("no remote workers: call local_worker.sample() instead")
        with self.engine.together():  # direct calls: one message per host (`relay`)
            return [
                handle.call(
                    "sample",
                    **self.sample_kwargs(handle),
                    speculative=speculative,
                    direct=self.direct_calls,
                    relay=True,
                )
                for handle in self._remote
            ]

    def sample_kwargs(self, handle: Any) -> dict[str, Any]:
        """Keyword arguments for the next ``sample`` call to ``handle``.

        Re-sends the weights first if the worker was re-created since its last
        sync (see `note_sampled`), and hands over weights deferred by
        ``sync_weights(defer=True)`` as ``{"weights": ...}``.

        Raises:
            ValueError: If ``handle`` is not in this set.
        """
        index, member = self._find(handle)
        with self._lock:
            self._resync_if_restarted(index, member)
            if index not in self._deferred:
                return {}
            self._deferred.discard(index)
            self._synced_restarts[index] = member.restarts
            single = len(self._remote) == 1
            return {"weights": self._weights if single else self._weights_in_cluster()}

    def set_worker_setup(self, handle: Any, fn: Callable[[RolloutWorker], Any]) -> Any:
        """Runs ``fn(worker)`` on ``handle`` now and again whenever it is re-created.

        For per-worker settings that are not weights, such as Ape-X's fixed
        exploration epsilon of each worker (a re-created worker starts from
        the policy's config).

        Returns:
            The TaskRef of this first ``apply`` call.

        Raises:
            ValueError: If ``handle`` is not in this set.
        """
        index, member = self._find(handle)
        with self._lock:
            self._setups[index] = fn
            return member.call("apply", fn, direct=self.direct_calls)

    def note_sampled(self, handle: Any) -> None:
        """Re-sends the weights to ``handle`` if it was re-created since its last sync.

        For callers that call ``sample`` on the handles themselves instead of
        through `sample` (e.g. asynchronous rollouts): call it after each batch.

        Raises:
            ValueError: If ``handle`` is not in this set.
        """
        with self._lock:
            self._resync_if_restarted(*self._find(handle))

    def _find(self, handle: Any) -> tuple[int, Any]:
        for index, member in enumerate(self._remote):
            if member is handle:
                return index, member
        raise ValueError(f"{handle!r} is not a remote worker of this WorkerSet")

    def _weights_in_cluster(self) -> Any:
        """The TaskRef holding the last weights, placed on first need or if lost.

        Direct calls get them as ``engine.share(weights)``: the first call takes
        them along and the other workers fetch them from its worker. Scheduled
        calls get a small task's result, which Dask can compute again should
        its worker die.
        """
        ref = self._weights_ref
        if self.direct_calls:
            if ref is None:
                ref = self._weights_ref = self.engine.share(self._weights)
        elif ref is None or (ref.done() and ref.exception(timeout=0) is not None):
            ref = self._weights_ref = self.engine.submit(_identity, self._weights, name="weights")
        return ref

    def _resync_if_restarted(self, index: int, handle: Any) -> None:
        restarts = handle.restarts
        if restarts == self._synced_restarts[index]:
            return
        self._synced_restarts[index] = restarts
        self._deferred.discard(index)  # the re-sync sends the latest weights
        handle.call("set_weights", self._weights_in_cluster(), direct=self.direct_calls)
        if index in self._setups:
            handle.call("apply", self._setups[index], direct=self.direct_calls)
        self.resyncs += 1

    def get_rng_states(self) -> list[dict[str, Any]]:
        """Each worker's `RolloutWorker.get_rng_state`, the local worker's first.

        Waits for the remote workers' calls in flight (the states follow them)."""
        with self._lock:
            calls = [(h, h.call("get_rng_state", direct=self.direct_calls)) for h in self._remote]
        return [
            self._local.get_rng_state(),
            *(self._answer(handle, ref, "get_rng_state") for handle, ref in calls),
        ]

    def _answer(self, handle: WorkerHandle, ref, method: str, *args) -> Any:
        """``ref``'s result; if it was lost with its worker (a checkpoint taken as a
        worker dies), the same call again on the worker re-created (its state is then
        that worker's). Raises once the worker is out of restarts."""
        while True:
            try:
                return ref.result()
            except WorkerLostError:
                if not handle.alive:
                    raise
                ref = handle.call(method, *args, direct=self.direct_calls)

    def set_rng_states(self, states: Sequence[dict[str, Any]]) -> None:
        """Restores `get_rng_states` results, worker by worker (extra states, or
        workers without one, when the number of workers changed, are left as they are)."""
        if states:
            self._local.set_rng_state(states[0])
        with self._lock:
            calls = [
                (handle, handle.call("set_rng_state", state, direct=self.direct_calls), state)
                for handle, state in zip(self._remote, states[1:], strict=False)
            ]
        for handle, ref, state in calls:
            self._answer(handle, ref, "set_rng_state", state)

    def foreach_worker(self, fn: Callable[[RolloutWorker], Any], local: bool = True) -> list[Any]:
        """Runs ``fn(worker)`` on every worker and waits for the results.

        Args:
            fn: A picklable function of a `RolloutWorker`.
            local: Include the local worker (its result comes first).

        Returns:
            The results, local worker first, then remote workers in order.
        """
        refs = [handle.call("apply", fn, direct=self.direct_calls) for handle in self._remote]
        results = [fn(self._local)] if local else []
        return results + list(self.engine.gather(refs))

    def stop(self) -> None:
        """Kills the remote workers and closes the local worker's envs (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.learner_group is not None:
            self.learner_group.stop()
        self._kill(self._remote)
        self._local.close()

    @staticmethod
    def _kill(handles: Any) -> None:
        for handle in handles:
            with contextlib.suppress(EngineError):  # already gone for good
                handle.kill()

    def __enter__(self) -> WorkerSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
