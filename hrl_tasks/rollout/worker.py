"""`RolloutWorker`: a vector env and a policy copy that turn weights into batches.

A rollout worker lives in an engine stateful worker (or in the driver, as a
`WorkerSet`'s local worker)::

    worker = engine.create_worker(RolloutWorker, "CartPole-v1", policy, num_envs=8, seed=0)
    worker.call("set_weights", weights_ref)
    batch, metrics = worker.call("sample").result()

`sample` steps ``num_envs`` envs for ``rollout_fragment_length`` steps each.
The batch holds one block of rows per sub-env, in time order (the layout
`Policy.postprocess_trajectory` and IMPALA's fragments expect), each block
postprocessed by the policy, then concatenated. Columns: ``obs``,
``actions`` (as sampled; a Box action is clipped only for ``env.step``),
``rewards`` (float32), ``terminateds``, ``truncateds``, ``next_obs`` (on an
episode end: the final observation before the reset), ``eps_id``, ``t``
(step within the episode), the policy's extras (``logp``, ``values``) and,
when the policy gives ``values``, ``next_values`` (see
`hrl_tasks.policies.actor_critic`).

An env whose ``step`` raises is counted in ``env_errors`` and its episode is
cut there as a truncation (reward 0, ``next_obs`` = the last observation);
the env is built again and reset, and sampling goes on. An env that fails
more than ``max_env_errors`` times in a row, or returns a NaN or infinite
observation or reward, ends the call with `EnvError` naming the env, the
sub-env and the step: nothing trains on it.

The worker deliberately has no ``get_state``/``restore_state``: the engine
would then snapshot it after every call. A re-created worker starts from its
construction arguments and its `WorkerSet` re-sends the weights.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.data import SampleBatch
from hrl_tasks.data.running_stats import RunningStats
from hrl_tasks.envs.make import EnvError, EnvLike, env_name, make_env
from hrl_tasks.policies import Policy
from hrl_tasks.rollout.malloc import ROLLOUT_MMAP_THRESHOLD, limit_arenas, map_blocks_from
from hrl_tasks.rollout.reward_scaling import RewardScaler

PolicyFactory = Callable[[gym.Space, gym.Space], Policy]
EPS_ID_BITS = 40  # eps_id = worker_index << 40 | counter


def torch_single_thread() -> None:
    """One torch thread in this process, if torch is loaded (by a torch policy)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def derive_seed(seed: int, *salt: int) -> int:
    """A 31-bit seed from ``seed`` and ``salt`` (e.g. worker index), via ``SeedSequence``."""
    return int(np.random.SeedSequence([seed, *salt]).generate_state(1)[0] >> 1)


class WorkerCalls:
    """The calls every rollout worker answers alike, over its ``policy`` and counters
    (`RolloutWorker`, and `MultiAgentRolloutWorker`, whose policy is a `PolicyMap`)."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """The policy's weights (numpy)."""
        return self.policy.get_weights()

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Loads weights into the policy."""
        self.policy.set_weights(weights)

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, Any]:
        """``policy.learn_on_batch(batch)``, for a local learner."""
        return self.policy.learn_on_batch(batch)

    def get_metrics(self) -> dict[str, Any]:
        """Totals since construction, and the episodes ended since the last call.

        Returns:
            ``worker_index``, ``env_steps``, ``episodes`` and ``env_errors``
            (totals), ``episode_returns`` and ``episode_lengths`` (since the
            previous `get_metrics`).
        """
        unreported = self._unreported
        self._unreported = {key: [] for key in unreported}
        return {"worker_index": self.worker_index, **self._totals, **unreported}

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Returns ``fn(self, *args)``, run where the worker lives."""
        return fn(self, *args)

    def ping(self) -> str:
        """Returns ``"pong"``: the worker is alive and its earlier calls have run."""
        return "pong"

    def _seed_policy(self, seed: int | None) -> None:
        if seed is not None:
            self.policy.seed(derive_seed(seed, self.worker_index, 1))
        elif self.worker_index != 0:  # copies of one policy must not explore in lockstep
            self.policy.seed(derive_seed(secrets.randbits(62), self.worker_index, 1))

    def _first_episode_id(self, seed: int | None) -> int:
        """The worker index in the high bits; with no seed a random offset, so that a
        re-created worker does not reuse its ids."""
        first = 0 if seed is not None else secrets.randbits(EPS_ID_BITS - 1)
        return (self.worker_index << EPS_ID_BITS) + first


class RolloutWorker(WorkerCalls):
    """Samples experience with a policy copy in a gymnasium vector env.

    Args:
        env: A gymnasium id, a registered name, an ``EnvSpec`` or a callable
            (see `hrl_tasks.envs.make`).
        policy_factory_or_policy: A `Policy` (pickled into remote workers), or
            ``factory(observation_space, action_space) -> Policy`` of one sub-env.
        num_envs: Sub-envs stepped together.
        rollout_fragment_length: Steps per sub-env in one `sample` call.
        seed: Makes runs reproducible: envs and the policy's randomness
            (`Policy.seed`) are seeded from ``(seed, worker_index)``. None: envs
            are seeded at random, and so is the policy of a remote worker
            (``worker_index`` >= 1; worker 0's is left as it is). Episode
            ids are deterministic with a seed; without one they start at a
            random offset, so a re-created worker does not reuse its ids.
        env_config: Keyword arguments for the env.
        worker_index: 0 for a local worker, 1.. for remote ones; keeps seeds
            and episode ids apart between workers.
        single_thread: Limit torch to one thread, if torch is loaded (rollout
            processes must; a driver that also learns should not), and have
            glibc map blocks of 16 KiB and more on their own, which keeps a
            worker process's heap from growing under its messages'
            buffers (`hrl_tasks.rollout.malloc`). A policy that acts in numpy
            never loads torch.
        max_env_errors: Failures in a row of one sub-env (each followed by
            building it again) before sampling gives up with `EnvError`.
        weights: Loaded into the policy before the first call (a `WorkerSet`
            re-creates a remote worker with its latest weights this way, so
            that no call samples with the factory's initial ones).
        record_experience: A directory (local path or fsspec URL) where the
            worker writes what it samples as Parquet, whole episodes in parts
            (`hrl_tasks.data.experience`); written out when the worker closes.
        env_backend: ``"gymnasium"`` (`SameStepVectorEnv`) or ``"envpool"`` (EnvPool's
            C++ envs of the id ``env``, `hrl_tasks.envs.envpool_backend`).
    """

    def __init__(
        self,
        env: EnvLike,
        policy_factory_or_policy: Policy | PolicyFactory,
        num_envs: int = 1,
        rollout_fragment_length: int = 128,
        seed: int | None = None,
        env_config: Mapping[str, Any] | None = None,
        worker_index: int = 0,
        *,
        single_thread: bool = True,
        max_env_errors: int = 3,
        weights: dict[str, np.ndarray] | None = None,
        record_experience: str | None = None,
        env_backend: str = "gymnasium",
    ) -> None:
        if single_thread:  # before the policy is built, and again after: it may load torch
            torch_single_thread()
            map_blocks_from(ROLLOUT_MMAP_THRESHOLD)  # a worker process's messages: no heap growth
            limit_arenas()  # nor an arena per thread that ever overlapped others
        if rollout_fragment_length < 1:
            raise ValueError(f"rollout_fragment_length must be >= 1, got {rollout_fragment_length}")
        self.worker_index = int(worker_index)
        self.num_envs = int(num_envs)
        self.rollout_fragment_length = int(rollout_fragment_length)
        env_seed = None if seed is None else derive_seed(seed, self.worker_index, 0)
        self.env_name = env_name(env)
        self.env = make_env(
            env,
            num_envs,
            env_config=env_config,
            catch_errors=True,
            max_errors_in_a_row=max_env_errors,
            backend=env_backend,
        )
        self.policy = self._make_policy(policy_factory_or_policy)
        if single_thread:
            torch_single_thread()
        self._seed_policy(seed)
        if weights is not None:
            self.set_weights(weights)
        self._action_bounds = self._bounds(self.env.single_action_space)
        self._obs, _ = self.env.reset(seed=env_seed)
        self._next_eps = self._first_episode_id(seed)
        self._eps_id = np.array([self._new_eps_id() for _ in range(num_envs)], np.int64)
        self._ep_return = np.zeros(num_envs, np.float64)
        self._ep_len = np.zeros(num_envs, np.int64)
        self._error_counts = [self.env.errors_of(i) for i in range(num_envs)]
        self._errors_seen = 0
        self._totals = {"env_steps": 0, "episodes": 0, "env_errors": 0}
        self._unreported: dict[str, list] = {"episode_returns": [], "episode_lengths": []}
        self._reward_scaler: RewardScaler | None = None  # with reward normalization
        self._recording = None if record_experience is None else self._record_to(record_experience)

    def _make_policy(self, policy_factory_or_policy: Policy | PolicyFactory) -> Policy:
        if isinstance(policy_factory_or_policy, Policy):
            return policy_factory_or_policy
        policy = policy_factory_or_policy(
            self.env.single_observation_space, self.env.single_action_space
        )
        if not isinstance(policy, Policy):
            raise TypeError(f"the policy factory returned {type(policy).__name__}, not a Policy")
        return policy

    @staticmethod
    def _bounds(space: gym.Space) -> tuple[np.ndarray, np.ndarray] | None:
        return (space.low, space.high) if isinstance(space, gym.spaces.Box) else None

    def _new_eps_id(self) -> int:
        eps_id, self._next_eps = self._next_eps, self._next_eps + 1
        return eps_id

    # Sampling -------------------------------------------------------------------------

    def sample(
        self, num_steps: int | None = None, weights: dict[str, np.ndarray] | None = None
    ) -> tuple[SampleBatch, dict[str, Any]]:
        """Steps every sub-env ``num_steps`` times with ``explore=True``.

        Args:
            num_steps: Steps per sub-env; default ``rollout_fragment_length``.
                The batch has ``num_steps * num_envs`` rows.
            weights: Loaded into the policy first (how a `WorkerSet` sends
                deferred weights: one call instead of two).

        Returns:
            ``(batch, metrics)``: the postprocessed batch, and a dict with
            ``env_steps`` (rows), ``episode_returns`` and ``episode_lengths``
            (episodes that ended during this call, env errors excluded),
            ``env_errors`` (steps that raised), ``worker_index`` and
            ``sample_s`` (seconds this call took in the worker); and
            ``obs_stats``, the `RunningStats` state of the observations, when
            the policy normalizes them.
        """
        started = time.perf_counter()
        steps = self.rollout_fragment_length if num_steps is None else int(num_steps)
        if steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {steps}")
        if weights is not None:
            self.set_weights(weights)
        columns: dict[str, np.ndarray] = {}  # [T, N, ...], filled step by step
        metrics = {"env_steps": steps * self.num_envs, "episode_returns": [], "episode_lengths": []}
        errors_before = self._errors_seen
        for t in range(steps):
            self._step(t, steps, columns, metrics)
        self._check_finite(columns)
        if self._recording is not None:  # as the env returned it, rewards unscaled
            self._recording.add(columns)
        gamma = getattr(self.policy, "reward_normalization_gamma", None)
        if gamma is not None:  # episode returns (metrics) were counted on the env's rewards
            if self._reward_scaler is None:
                self._reward_scaler = RewardScaler(self.num_envs, gamma)
            ended = columns[SampleBatch.TERMINATEDS] | columns[SampleBatch.TRUNCATEDS]
            columns[SampleBatch.REWARDS] = self._reward_scaler(columns[SampleBatch.REWARDS], ended)
        if self.policy.normalizes_observations:  # what the learner's statistics merge
            shape = self.policy.observation_space.shape
            metrics["obs_stats"] = RunningStats.of(columns[SampleBatch.OBS], shape).state()
        if SampleBatch.VALUES in columns:
            columns[SampleBatch.NEXT_VALUES] = self._next_values(columns)
        if not self.policy.reads_next_obs:
            del columns[SampleBatch.NEXT_OBS]
        fragments = [
            self.policy.postprocess_trajectory(
                SampleBatch({k: v[:, i] for k, v in columns.items()})
            )
            for i in range(self.num_envs)
        ]
        metrics["env_errors"] = self._errors_seen - errors_before
        metrics["worker_index"] = self.worker_index
        metrics["sample_s"] = time.perf_counter() - started
        self._totals["env_steps"] += metrics["env_steps"]
        self._totals["env_errors"] += metrics["env_errors"]
        for key in self._unreported:
            self._unreported[key].extend(metrics[key])
        return SampleBatch.concat_samples(fragments), metrics

    def _step(
        self, t: int, steps: int, columns: dict[str, np.ndarray], metrics: dict[str, Any]
    ) -> None:
        """One vector step, written into row ``t`` of ``columns`` (allocated at ``t == 0``)."""
        obs = self._obs
        try:
            actions, extras = self.policy.compute_actions(obs, explore=True)
        except Exception:  # a policy may fail on what the env returned: say so
            self._check_finite({SampleBatch.OBS: np.asarray(obs)[None], SampleBatch.T: None})
            raise
        env_actions = (
            actions if self._action_bounds is None else np.clip(actions, *self._action_bounds)
        )
        next_obs, rewards, terminateds, truncateds, infos = self.env.step(env_actions)
        row = {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rewards,
            SampleBatch.TERMINATEDS: terminateds,
            SampleBatch.TRUNCATEDS: truncateds,
            SampleBatch.NEXT_OBS: next_obs,
            SampleBatch.EPS_ID: self._eps_id,
            SampleBatch.T: self._ep_len,
            **extras,
        }
        if t == 0:
            columns.update(self._allocate(row, steps))
        for name, value in row.items():
            columns[name][t] = value
        self._ep_return += rewards
        self._ep_len += 1
        ended = np.flatnonzero(terminateds | truncateds)
        if len(ended):
            self._end_episodes(t, ended, infos, columns, metrics)
        self._obs = next_obs

    def _check_finite(self, columns: dict[str, np.ndarray]) -> None:
        """Raise `EnvError` at the first NaN or infinite reward or observation.

        ``next_obs`` holds what each step returned, ``obs`` also what resets did."""
        for name in (SampleBatch.REWARDS, SampleBatch.NEXT_OBS, SampleBatch.OBS):
            values = columns.get(name)
            if values is None:
                continue
            if values.dtype.kind != "f" or np.isfinite(values).all():
                continue
            bad = ~np.isfinite(values.reshape(*values.shape[:2], -1)).all(axis=-1)
            t, i = (int(x[0]) for x in np.nonzero(bad))
            what = "reward" if name == SampleBatch.REWARDS else "observation"
            step = (  # the step that returned it; -1: a reset did
                columns[SampleBatch.T][t, i]
                if name != SampleBatch.OBS
                else self._ep_len[i] - 1
                if columns[SampleBatch.T] is None
                else -1
            )
            when = "a reset" if step < 0 else f"step {int(step)} of an episode"
            raise EnvError(
                f"env {self.env_name!r} returned a non-finite {what} {values[t, i]!r} from "
                f"{when} (rollout worker {self.worker_index}, sub-env {i}); fix the env or "
                "wrap it to clean its output"
            )

    @staticmethod
    def _allocate(row: dict[str, Any], steps: int) -> dict[str, np.ndarray]:
        """Empty ``[steps, N, ...]`` columns shaped like the first step's row."""
        dtypes = {
            SampleBatch.REWARDS: np.float32,
            SampleBatch.TERMINATEDS: bool,
            SampleBatch.TRUNCATEDS: bool,
        }
        columns = {}
        for name, value in row.items():
            value = np.asarray(value)
            columns[name] = np.empty((steps, *value.shape), dtypes.get(name, value.dtype))
        return columns

    def _end_episodes(
        self,
        t: int,
        ended: np.ndarray,
        infos: dict[str, Any],
        columns: dict[str, np.ndarray],
        metrics: dict[str, Any],
    ) -> None:
        """Sub-envs ``ended`` finished an episode at step ``t``: the final observation
        goes to ``next_obs``, the episode to the metrics (unless the env raised), and
        the sub-env gets a new episode id."""
        final_obs = infos["final_obs"]
        next_obs = columns[SampleBatch.NEXT_OBS]
        counted = [i for i in ended if not self._raised(i)]
        for i in ended:
            next_obs[t, i] = final_obs[i]
        metrics["episode_returns"].extend(self._ep_return[counted].tolist())
        metrics["episode_lengths"].extend(self._ep_len[counted].tolist())
        self._totals["episodes"] += len(counted)
        self._ep_return[ended] = 0.0
        self._ep_len[ended] = 0
        self._eps_id[ended] = np.arange(self._next_eps, self._next_eps + len(ended))
        self._next_eps += len(ended)

    def _raised(self, i: int) -> bool:
        """Whether sub-env ``i`` raised since the last look; counts what it raised.

        Looked at when its episode ends: a step that raises ends the episode,
        and the env is only reset (which may raise too) after an end."""
        errors = self.env.errors_of(i)
        new = errors - self._error_counts[i]
        if new:
            self._error_counts[i] = errors
            self._errors_seen += new
        return new > 0

    def _next_values(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """``V(s_{t+1})`` per row, ``[T, N]``: the next row's value inside an episode,
        ``V(final obs)`` on truncations and at the fragment's end, 0 on terminations."""
        values = columns[SampleBatch.VALUES].astype(np.float32)
        terminateds = columns[SampleBatch.TERMINATEDS]
        truncateds = columns[SampleBatch.TRUNCATEDS]
        next_values = np.zeros_like(values)
        next_values[:-1] = values[1:]
        need = truncateds.copy()
        need[-1] |= ~terminateds[-1]
        if need.any():
            next_values[need] = self.policy.compute_values(columns[SampleBatch.NEXT_OBS][need])
        next_values[terminateds] = 0.0
        return next_values

    # Random numbers, closing (weights, learning and metrics: WorkerCalls) -----------

    def get_rng_state(self) -> dict[str, Any]:
        """The random-number states of the policy and of each sub-env, and the next
        episode id, as plain data: what a resumed run needs to go on where this one is.
        Episodes in progress are not included (a resumed worker starts new ones)."""
        return {
            "policy": self.policy.get_rng_state(),
            "envs": self.env.rng_states(),
            "next_episode_id": self._next_eps,
        }

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restores a `get_rng_state` result (of a worker with the same index)."""
        self.policy.set_rng_state(state["policy"])
        self.env.set_rng_states(state["envs"])
        self._next_eps = int(state["next_episode_id"])

    def close(self) -> None:
        """Writes out what the worker records, and closes the env (the engine calls this
        when the worker is killed)."""
        try:
            self.flush_experience()
        finally:
            self.env.close()

    def flush_experience(self) -> list[str]:
        """Writes the recorded experience still held (episodes still open are cut,
        their last step marked truncated); returns every file this worker wrote."""
        return [] if self._recording is None else self._recording.close()

    def _record_to(self, url: str):
        from hrl_tasks.data.experience import ExperienceRecording, PartWriter
        from hrl_tasks.version import __version__

        spaces = {
            "observation_space": repr(self.env.single_observation_space),
            "action_space": repr(self.env.single_action_space),
        }
        metadata = {
            "env": self.env_name,
            "worker_index": self.worker_index,
            "hrl_tasks_version": __version__,
            **spaces,
        }
        prefix = f"worker-{self.worker_index}-{secrets.token_hex(4)}"  # a re-created one too
        return ExperienceRecording(PartWriter(url, prefix, metadata))
