"""`MultiAgentRolloutWorker`: several policies acting in multi-agent envs, whole episodes at a time.

It has `RolloutWorker`'s construction arguments and calls (``sample``,
``set_weights``, ``get_metrics``...), so a `WorkerSet` holds either; its policy
is a `PolicyMap`. ``sample`` steps ``num_envs`` envs together and returns the
episodes that ended, at least ``num_steps * num_envs`` env steps of them
(RLlib's ``complete_episodes`` batch mode: no trajectory is cut, so nothing
needs a bootstrap value but truncated ends). Episodes in progress go on in
the next call.

Each agent's experience is its own trajectory: a row is the agent's
observation, its action, the rewards it got until its next observation (in
a turn-based game: after the other players moved), that next observation in
``next_obs``, and whether it ``terminateds`` or ``truncateds`` the agent.
At every step the agents to act are grouped by the policy the mapping gives
them (once per agent and episode), and each policy acts on its group in one
call. A finished trajectory is postprocessed by its policy, as in a
single-agent worker (``next_values`` first, for policies with values).

``sample`` returns ``(MultiAgentBatch, metrics)``; the metrics hold
``episode_returns`` (per episode, the sum over its agents: what
``episode_return_mean`` and ``--stop-reward`` read), ``episode_lengths`` (env
steps), and ``policy_returns`` (policy id -> the returns of the agents it
played, one per agent and episode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hrl_tasks.data import MultiAgentBatch, SampleBatch
from hrl_tasks.data.experience import trajectory_rows
from hrl_tasks.envs.make import EnvError, EnvLike, env_name
from hrl_tasks.envs.multi_agent import ALL, MultiAgentEnv, make_multi_agent_env
from hrl_tasks.policies import Policy
from hrl_tasks.policies.policy_map import PolicyMap, policy_observation
from hrl_tasks.rollout.malloc import ROLLOUT_MMAP_THRESHOLD, limit_arenas, map_blocks_from
from hrl_tasks.rollout.worker import WorkerCalls, derive_seed, torch_single_thread

MAX_EPISODE_STEPS = 1_000_000  # whole episodes are sampled: one that never ends is an error


@dataclass
class Episode:
    """One episode in one sub-env: what ``policy_mapping_fn(agent_id, episode)`` sees.

    Attributes:
        id: Unique within the run (worker index in the high bits).
        worker_index: The rollout worker that plays it.
        policy_of: agent id -> policy id, fixed at the agent's first step.
    """

    id: int
    worker_index: int
    policy_of: dict[Any, Any] = field(default_factory=dict)
    rows: dict[Any, list[dict]] = field(default_factory=dict)
    pending: dict[Any, dict] = field(default_factory=dict)
    returns: dict[Any, float] = field(default_factory=dict)
    length: int = 0


class MultiAgentRolloutWorker(WorkerCalls):
    """Samples whole multi-agent episodes with a `PolicyMap` (see the module doc).

    Args:
        env: A PettingZoo env (name, module path or `PettingZooSpec`), or a
            callable returning a `MultiAgentEnv`, a PettingZoo ``ParallelEnv``
            or ``AECEnv``.
        policy_factory_or_policy: A `PolicyMap`, or a factory called with
            ``(env.observation_space, env.action_space)`` returning one.
        num_envs, rollout_fragment_length, seed, env_config, worker_index,
        single_thread, weights: As for `RolloutWorker` (``weights`` per policy id).
        max_env_errors: Accepted for `RolloutWorker`'s signature; an env that
            raises ends the call with `EnvError`.
        record_experience: A directory (local path or fsspec URL) where every
            agent's trajectory is written as Parquet when its episode ends, one
            file series per policy (`hrl_tasks.data.experience`).
    """

    def __init__(
        self,
        env: EnvLike,
        policy_factory_or_policy: PolicyMap | Any,
        num_envs: int = 1,
        rollout_fragment_length: int = 128,
        seed: int | None = None,
        env_config: Mapping[str, Any] | None = None,
        worker_index: int = 0,
        *,
        single_thread: bool = True,
        max_env_errors: int = 3,
        weights: Mapping[Any, Any] | None = None,
        record_experience: str | None = None,
    ) -> None:
        if single_thread:
            torch_single_thread()
            map_blocks_from(ROLLOUT_MMAP_THRESHOLD)
            limit_arenas()
        if rollout_fragment_length < 1:
            raise ValueError(f"rollout_fragment_length must be >= 1, got {rollout_fragment_length}")
        self.worker_index = int(worker_index)
        self.num_envs = int(num_envs)
        self.rollout_fragment_length = int(rollout_fragment_length)
        self.env_name = env_name(env)
        self.envs: list[MultiAgentEnv] = [
            make_multi_agent_env(env, env_config) for _ in range(self.num_envs)
        ]
        policy = policy_factory_or_policy
        if not isinstance(policy, Policy):
            policy = policy(self.envs[0].observation_space, self.envs[0].action_space)
        if not isinstance(policy, PolicyMap):
            raise TypeError(f"a multi-agent worker needs a PolicyMap, got {type(policy).__name__}")
        self.policy: PolicyMap = policy
        if single_thread:
            torch_single_thread()
        self._seed_policy(seed)
        if weights is not None:
            self.set_weights(weights)
        self._next_eps = self._first_episode_id(seed)
        env_seed = None if seed is None else derive_seed(seed, self.worker_index, 0)
        self._obs: list[dict] = []
        self._episodes: list[Episode] = []
        for i, sub_env in enumerate(self.envs):
            obs, _ = sub_env.reset(seed=None if env_seed is None else env_seed + i)
            self._obs.append(obs)
            self._episodes.append(self._new_episode())
        self._totals = {"env_steps": 0, "episodes": 0, "env_errors": 0}
        self._unreported: dict[str, list] = {"episode_returns": [], "episode_lengths": []}
        self._recording = None if record_experience is None else self._record_to(record_experience)

    def _record_to(self, url: str):
        import secrets

        from hrl_tasks.data.experience import PolicyRecordings
        from hrl_tasks.version import __version__

        metadata = {
            "env": self.env_name,
            "worker_index": self.worker_index,
            "hrl_tasks_version": __version__,
            "multi_agent": True,
        }
        spaces = {
            pid: (policy.observation_space, policy.action_space)
            for pid, policy in self.policy.policies.items()
        }
        prefix = f"worker-{self.worker_index}-{secrets.token_hex(4)}"
        return PolicyRecordings(url, prefix, metadata, spaces)

    def _new_episode(self) -> Episode:
        eps_id, self._next_eps = self._next_eps, self._next_eps + 1
        return Episode(eps_id, self.worker_index)

    # Sampling -------------------------------------------------------------------------

    def sample(
        self, num_steps: int | None = None, weights: Mapping[Any, Any] | None = None
    ) -> tuple[MultiAgentBatch, dict[str, Any]]:
        """Steps the envs until the episodes that ended hold ``num_steps * num_envs``
        env steps (default ``rollout_fragment_length``); returns those episodes'
        `MultiAgentBatch` and the metrics (see the module doc)."""
        steps = self.rollout_fragment_length if num_steps is None else int(num_steps)
        if steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {steps}")
        if weights is not None:
            self.set_weights(weights)
        wanted = steps * self.num_envs
        done: dict[Any, list[SampleBatch]] = {}
        metrics: dict[str, Any] = {
            "env_steps": 0,
            "episode_returns": [],
            "episode_lengths": [],
            "policy_returns": {},
        }
        while metrics["env_steps"] < wanted:
            for i, episode in self._step_all():
                self._finish(episode, done, metrics)
                self._episodes[i] = self._new_episode()
                self._obs[i], _ = self.envs[i].reset()
        batches = {pid: SampleBatch.concat_samples(parts) for pid, parts in done.items()}
        metrics["env_errors"] = 0
        metrics["worker_index"] = self.worker_index
        self._totals["env_steps"] += metrics["env_steps"]
        self._totals["episodes"] += len(metrics["episode_returns"])
        for key in self._unreported:
            self._unreported[key].extend(metrics[key])
        return MultiAgentBatch(batches, env_steps=metrics["env_steps"]), metrics

    def _step_all(self) -> list[tuple[int, Episode]]:
        """One step of every sub-env; returns the (index, episode) pairs that ended."""
        groups: dict[Any, list[tuple[int, Any, np.ndarray]]] = {}
        for i, (obs, episode) in enumerate(zip(self._obs, self._episodes, strict=True)):
            for agent, observation in obs.items():
                pid = episode.policy_of.get(agent)
                if pid is None:
                    pid = episode.policy_of[agent] = self.policy.policy_id(agent, episode)
                groups.setdefault(pid, []).append((i, agent, policy_observation(observation)))
        actions: list[dict] = [{} for _ in self.envs]
        for pid, members in groups.items():
            stacked = np.stack([vector for _, _, vector in members])
            chosen, extras = self.policy[pid].compute_actions(stacked, explore=True)
            for k, (i, agent, vector) in enumerate(members):
                row = {SampleBatch.OBS: vector, SampleBatch.ACTIONS: chosen[k]}
                row.update((name, column[k]) for name, column in extras.items())
                self._episodes[i].pending[agent] = row
                actions[i][agent] = _env_action(chosen[k])
        ended = []
        for i, sub_env in enumerate(self.envs):
            try:
                result = sub_env.step(actions[i])
            except Exception as exc:
                raise EnvError(
                    f"env {self.env_name!r} raised in step (rollout worker {self.worker_index}, "
                    f"sub-env {i}): {exc!r}"
                ) from exc
            if self._record(self._episodes[i], *result):
                ended.append((i, self._episodes[i]))
            else:  # the agents to act next; finished ones gave their last observation
                obs, _, terminateds, truncateds, _ = result
                self._obs[i] = {
                    agent: o
                    for agent, o in obs.items()
                    if not (terminateds.get(agent) or truncateds.get(agent))
                }
        return ended

    def _record(self, episode: Episode, obs, rewards, terminateds, truncateds, infos) -> bool:
        """Books one env step into ``episode``; returns whether the episode ended."""
        episode.length += 1
        for agent, reward in rewards.items():
            reward = float(reward)
            if not np.isfinite(reward):
                raise EnvError(
                    f"env {self.env_name!r} returned a non-finite reward {reward!r} for agent "
                    f"{agent!r} (rollout worker {self.worker_index})"
                )
            episode.returns[agent] = episode.returns.get(agent, 0.0) + reward
            if agent in episode.pending:
                pending = episode.pending[agent]
                pending[SampleBatch.REWARDS] = pending.get(SampleBatch.REWARDS, 0.0) + reward
        over = bool(terminateds.get(ALL)) or bool(truncateds.get(ALL))
        default = ALL if over else None  # an episode's end is every agent's end
        for agent, observation in obs.items():
            if agent in episode.pending and SampleBatch.ACTIONS in episode.pending[agent]:
                vector = policy_observation(observation)
                self._close(episode, agent, vector, terminateds, truncateds, default)
        if not over and episode.length >= MAX_EPISODE_STEPS:
            raise EnvError(
                f"env {self.env_name!r} has run one episode for {episode.length} steps without "
                "ending it: a multi-agent env ends an episode with terminateds['__all__'] or "
                f"truncateds['__all__'] (rollout worker {self.worker_index})"
            )
        if over:  # agents that got no last observation end where they last were
            for agent in list(episode.pending):
                last = episode.pending[agent][SampleBatch.OBS]
                self._close(episode, agent, last, terminateds, truncateds, default=ALL)
        return over

    @staticmethod
    def _close(episode, agent, next_vector, terminateds, truncateds, default=None) -> None:
        """The agent's pending step is complete: it got its next observation."""
        row = episode.pending.pop(agent)
        row.setdefault(SampleBatch.REWARDS, 0.0)
        row[SampleBatch.NEXT_OBS] = next_vector
        row[SampleBatch.TERMINATEDS] = bool(terminateds.get(agent, terminateds.get(default)))
        row[SampleBatch.TRUNCATEDS] = bool(truncateds.get(agent, truncateds.get(default)))
        episode.rows.setdefault(agent, []).append(row)

    def _finish(self, episode: Episode, done: dict[Any, list], metrics: dict[str, Any]) -> None:
        """Turns the ended episode's trajectories into postprocessed batches, per policy."""
        for agent_index, (agent, rows) in enumerate(episode.rows.items()):
            pid = episode.policy_of[agent]
            policy = self.policy[pid]
            columns = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
            columns[SampleBatch.REWARDS] = columns[SampleBatch.REWARDS].astype(np.float32)
            columns[SampleBatch.EPS_ID] = np.full(len(rows), episode.id, np.int64)
            columns[SampleBatch.T] = np.arange(len(rows), dtype=np.int64)
            columns["agent_index"] = np.full(len(rows), agent_index, np.int64)
            if self._recording is not None:  # as the env returned it
                self._recording.add(pid, trajectory_rows(columns, episode.id, agent, pid))
            if SampleBatch.VALUES in columns:
                columns[SampleBatch.NEXT_VALUES] = _next_values(policy, columns)
            done.setdefault(pid, []).append(policy.postprocess_trajectory(SampleBatch(columns)))
            returns = metrics["policy_returns"].setdefault(pid, [])
            returns.append(episode.returns.get(agent, 0.0))
        metrics["env_steps"] += episode.length
        metrics["episode_returns"].append(float(sum(episode.returns.values())))
        metrics["episode_lengths"].append(episode.length)

    # Random numbers, closing (weights, learning and metrics: WorkerCalls) -----------

    def get_rng_state(self) -> dict[str, Any]:
        """The policies' random-number states and the next episode id."""
        return {"policy": self.policy.get_rng_state(), "next_episode_id": self._next_eps}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restores a `get_rng_state` result."""
        self.policy.set_rng_state(state.get("policy"))
        self._next_eps = int(state["next_episode_id"])

    def close(self) -> None:
        """Writes out what the worker records, and closes the envs."""
        try:
            self.flush_experience()
        finally:
            for sub_env in self.envs:
                sub_env.close()

    def flush_experience(self) -> list[str]:
        """Writes the recorded experience still held: the trajectories of episodes
        still open are cut, their last step marked truncated; returns every file this
        worker wrote."""
        if self._recording is None:
            return []
        if not self._recording.closed:
            for episode in self._episodes:
                for agent, rows in episode.rows.items():
                    columns = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
                    cut = columns[SampleBatch.TERMINATEDS] | columns[SampleBatch.TRUNCATEDS]
                    columns[SampleBatch.TRUNCATEDS] = columns[SampleBatch.TRUNCATEDS].copy()
                    columns[SampleBatch.TRUNCATEDS][-1] |= not cut[-1]
                    pid = episode.policy_of[agent]
                    self._recording.add(pid, trajectory_rows(columns, episode.id, agent, pid))
                episode.rows.clear()
        return self._recording.close()


def _env_action(action: np.ndarray) -> Any:
    """A discrete action as a Python int (what PettingZoo's envs expect); others as they are."""
    return action.item() if np.ndim(action) == 0 else action


def _next_values(policy: Policy, columns: dict[str, np.ndarray]) -> np.ndarray:
    """``V(s_{t+1})`` per row of one agent's whole trajectory: the next row's value,
    then at the end 0 if terminated, else the value of the last observation."""
    values = columns[SampleBatch.VALUES].astype(np.float32)
    next_values = np.zeros_like(values)
    next_values[:-1] = values[1:]
    if not columns[SampleBatch.TERMINATEDS][-1]:
        last = columns[SampleBatch.NEXT_OBS][-1:]
        next_values[-1] = policy.compute_values(last)[0]
    inside = ~columns[SampleBatch.TERMINATEDS]
    return np.where(inside, next_values, 0.0).astype(np.float32)
