"""The Algorithm object: one plan, trained an iteration at a time, saved and restored.

Usage::

    algo = PPO({"env": "CartPole-v1", "num_workers": 2})
    while (result := algo.train())["episode_return_mean"] < 450:
        print(result["iteration"], result["episode_return_mean"])
    algo.save("runs/ppo/checkpoint.hrl")
    algo.stop()

    algo = hrl_tasks.load("runs/ppo")  # acting needs no cluster
    action = algo.compute_single_action(observation)
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hrl_tasks.algorithms.checkpoint import (
    FORMAT,
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from hrl_tasks.algorithms.config import AlgorithmConfig, ConfigError
from hrl_tasks.envs import env_name, make_env, require_single_agent
from hrl_tasks.envs.multi_agent import is_multi_agent, make_multi_agent_env
from hrl_tasks.flow import FlowContext, LocalIterator
from hrl_tasks.policies.policy_map import (
    DEFAULT_POLICY,
    PolicyMap,
    PolicySpec,
    policy_observation,
    policy_observation_space,
)
from hrl_tasks.policies.torch_utils import default_threads
from hrl_tasks.registry import get_algorithm
from hrl_tasks.rollout import RolloutWorker, WorkerSet
from hrl_tasks.rollout.learner_group import LearnerGroup
from hrl_tasks.rollout.multi_agent_worker import Episode, MultiAgentRolloutWorker
from hrl_tasks.rollout.worker import derive_seed
from hrl_tasks.scheduler import Engine, EngineError
from hrl_tasks.version import __version__


class Algorithm(abc.ABC):
    """Base class: subclasses set ``name``, ``config_class``, ``policy_class`` and write ``build_plan``.

    Args:
        config: a config object or a mapping of its keys (unknown keys and
            wrong types raise :class:`~hrl_tasks.algorithms.config.ConfigError`).
        engine: the engine to run on; default an embedded local cluster with
            one worker process per rollout worker, closed by :meth:`stop`.
        **overrides: config keys, as keywords.
    """

    name = "algorithm"
    config_class: type[AlgorithmConfig] = AlgorithmConfig
    policy_class: type | None = None  # built from the policy config's keys of config_class
    policy_config_class: type | None = None
    workers_learn = False  # rollout workers compute gradients (A3C): they need the full policy
    multi_agent = False  # trains multi-agent envs: PolicyMap, MultiAgentRolloutWorker
    learner_group = False  # can learn in a data-parallel learner group (num_learners)
    policy_noun = "policy"  # what a checkpoint that does not fit calls the policy
    policy_mismatch_hint = "was it saved with another config or env?"  # and what it suggests

    def __init__(self, config: AlgorithmConfig | Mapping | None = None, engine=None, **overrides):
        self.config = self.parse_config(config, overrides)
        policy = self.build_policy()  # a bad env fails before a cluster starts
        if isinstance(policy, PolicyMap) and len(policy) > 1 and policy.mapping_fn is None:
            raise ConfigError(
                f"policies {sorted(map(str, policy.policies))} need a policy_mapping_fn(agent_id, "
                "episode) -> policy id"
            )
        self.check_before_cluster(policy)
        self.owns_engine = engine is None
        self.engine = engine or Engine.local(**self.config.embedded_cluster())
        self.workers = None
        try:
            self.workers = WorkerSet(
                self.engine,
                self.rollout_env(),
                policy,
                num_workers=self.num_rollout_workers(),
                num_envs_per_worker=self.config.num_envs_per_worker,
                rollout_fragment_length=self.config.rollout_fragment_length,
                seed=self.config.seed,
                env_config=self.config.env_config,
                remote_policy=None if self.workers_learn else policy.inference_copy(),
                direct_calls=self.config.direct_calls,
                max_restarts=self.config.max_restarts,
                max_env_errors=self.config.max_env_errors,
                resources_per_worker=self.config.rollout_worker_resources,
                worker_class=MultiAgentRolloutWorker
                if isinstance(policy, PolicyMap)
                else RolloutWorker,
                record_experience=self.config.record_experience,
                env_backend=self.config.env_backend,
            )
            self.workers.learner_group = self.build_learner(policy)
            self.ctx = FlowContext(history=self.config.metrics_smoothing_episodes)
            self.plan = self.build_plan(self.workers, self.ctx)
        except BaseException:
            if self.workers is not None:
                self.workers.stop()
            if self.owns_engine:
                self.engine.close()
            raise
        self.iteration = 0
        self.time_total_s = 0.0

    def build_learner(self, policy):
        """What learns in place of the driver's policy: a `LearnerGroup` of
        ``num_learners`` processes, or None (the driver's policy learns)."""
        if not self.config.num_learners:
            return None
        return LearnerGroup(
            self.engine,
            policy,
            self.config.num_learners,
            resources=self.config.learner_resources or {"CPU": 1},
            max_restarts=self.config.max_restarts,
            num_threads=self.config.learner_threads,
            plaintext=self.config.learner_group_plaintext,
        )

    def check_before_cluster(self, policy) -> None:
        """What must hold before a cluster starts, beyond each key's own checks
        (algorithms add theirs).

        Raises:
            ConfigError: naming what does not fit.
        """
        self.check_learner_group(policy)
        self.check_recording()

    def check_learner_group(self, policy) -> None:
        """Refuses ``num_learners`` where the learner cannot be a group.

        Raises:
            ConfigError: naming the algorithms and policies that can.
        """
        if not self.config.num_learners:
            return
        if not self.learner_group:
            from hrl_tasks.registry import ALGORITHM_PATHS

            able = ", ".join(name for name in ALGORITHM_PATHS if get_algorithm(name).learner_group)
            raise ConfigError(
                f"{self.name} cannot learn in a learner group: set num_learners=0 (the driver "
                f"learns), or use an algorithm that can ({able})"
            )
        if isinstance(policy, PolicyMap):
            raise ConfigError(
                "num_learners is for single-agent envs: a multi-agent policy map learns in "
                "the driver (num_learners=0)"
            )

    def check_recording(self) -> None:
        """Refuses ``record_experience`` where it cannot record, before a cluster starts.

        Raises:
            ConfigError: without the ``offline`` extra.
        """
        if self.config.record_experience is None:
            return
        try:
            import fsspec  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"record_experience needs {exc.name}: pip install 'hrl_tasks[offline]'"
            ) from None

    @classmethod
    def parse_config(cls, config: AlgorithmConfig | Mapping | None, overrides: Mapping):
        """The config to run: one of this algorithm's config class is taken as it is
        (it was checked when built), with ``overrides`` checked over it; a mapping, or
        another algorithm's config, is read into this one's."""
        if type(config) is cls.config_class and not overrides:
            parsed = config
        elif type(config) is cls.config_class:  # unknown keys named as from_dict names them
            fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
            parsed = cls.config_class.from_dict(fields, **overrides)
        else:
            if isinstance(config, AlgorithmConfig):
                config = config.to_dict()
            parsed = cls.config_class.from_dict(config, **overrides)
        torch.set_num_threads(parsed.learner_threads or default_threads())
        return parsed

    def rollout_env(self):
        """The env spec rollout workers build: ``config.env``; PPO wraps a multi-agent
        env for a centralized critic (``central_critic``)."""
        return self.config.env

    def build_policy(self):
        """The learner's policy: a `PolicyMap` for a multi-agent env (algorithms with
        ``multi_agent``), else `make_policy` on the env's spaces.

        Raises:
            MultiAgentEnvError: for a multi-agent env and a single-agent algorithm.
            ConfigError: for ``policies`` with a single-agent env.
        """
        if self.multi_agent and is_multi_agent(self.rollout_env(), self.config.env_config):
            return self.make_policy_map()
        if self.config.policies is not None:
            raise ConfigError(
                f"policies are for multi-agent envs, and {env_name(self.config.env)!r} is a "
                "single-agent one; leave policies out"
            )
        return self.make_policy(*self.env_spaces())

    def make_policy_map(self) -> PolicyMap:
        """The policies of ``config.policies`` (or one shared one), each built by its
        spec's algorithm with that algorithm's config keys over this config's; each
        policy's full config is kept in ``self.policy_configs``."""
        cfg = self.config
        probe = make_multi_agent_env(self.rollout_env(), cfg.env_config)
        try:
            specs = cfg.policies or {DEFAULT_POLICY: PolicySpec()}
            first_agent = {}
            episode = Episode(id=0, worker_index=0)
            for agent in probe.possible_agents:
                pid = (
                    next(iter(specs))
                    if cfg.policy_mapping_fn is None
                    else cfg.policy_mapping_fn(agent, episode)
                )
                if pid not in specs:
                    raise ConfigError(
                        f"policy_mapping_fn({agent!r}, episode) returned {pid!r}, which is not "
                        f"among the policies {sorted(map(str, specs))}"
                    )
                first_agent.setdefault(pid, agent)
            policies, self.policy_configs, self.policy_algorithms = {}, {}, {}
            self.policy_agents = {}  # the agent whose spaces each policy took (checkpoints)
            for index, (pid, spec) in enumerate(specs.items()):
                agent = spec.agent if spec.agent is not None else first_agent.get(pid)
                if agent is None:
                    agent = probe.possible_agents[0]
                if agent not in probe.possible_agents:
                    raise ConfigError(
                        f"policies[{pid!r}].agent is {agent!r}, not one of the env's agents "
                        f"{probe.possible_agents}"
                    )
                self.policy_agents[pid] = agent
                observation_space = policy_observation_space(
                    spec.observation_space or probe.observation_space(agent)
                )
                action_space = spec.action_space or probe.action_space(agent)
                policies[pid], self.policy_configs[pid], self.policy_algorithms[pid] = (
                    self.make_spec_policy(spec, observation_space, action_space, index)
                )
        finally:
            probe.close()
        return PolicyMap(policies, cfg.policy_mapping_fn, cfg.policies_to_train)

    def make_spec_policy(self, spec: PolicySpec, observation_space, action_space, index=0):
        """``(policy, config, algorithm class)`` of one policy spec: the spec's algorithm
        (this one by default) with its config keys over the shared ones of this config.
        The ``index``-th policy's seed is derived from the config's, so that policies
        start from different weights (the first keeps the config's seed)."""
        cls = type(self) if spec.algorithm in (None, self.name) else get_algorithm(spec.algorithm)
        own = self.config.to_dict()
        if cls is not type(self):  # another algorithm: only the keys every algorithm has
            shared = {f.name for f in dataclasses.fields(AlgorithmConfig)}
            own = {key: value for key, value in own.items() if key in shared}
        overrides = dict(spec.config)
        if index and own.get("seed") is not None and "seed" not in overrides:
            overrides["seed"] = derive_seed(own["seed"], index)
        config = cls.config_class.from_dict(own, **overrides)
        policy = cls.policy_class(
            observation_space, action_space, config.pick(cls.policy_config_class)
        )
        return policy, config, cls

    def make_env(self):
        """One env of the config's, on its backend, built here (for spaces and evaluation)."""
        config = self.config
        return make_env(config.env, 1, env_config=config.env_config, backend=config.env_backend)

    def env_spaces(self) -> tuple:
        """The env's (observation space, action space), from one env built here.

        Raises:
            MultiAgentEnvError: for a PettingZoo env (single-agent algorithms).
            UnknownEnvError: for an env spec that names no env.
        """
        if self.config.env_backend == "gymnasium":  # EnvPool's ids are single-agent
            require_single_agent(self.config.env, self.name)
        probe = self.make_env()
        spaces = (probe.single_observation_space, probe.single_action_space)
        probe.close()
        return spaces

    @classmethod
    def for_acting(cls, config: AlgorithmConfig | Mapping | None = None, **overrides) -> Algorithm:
        """An algorithm that only acts: its policy, and no cluster, workers or plan.

        `hrl_tasks.load` makes these; `train` raises on them.
        """
        algo = cls.__new__(cls)
        algo.config = cls.parse_config(config, overrides)
        algo.build_for_acting()
        algo.engine, algo.workers, algo.plan, algo.owns_engine = None, None, None, False
        algo.acting = True
        return algo

    def build_for_acting(self) -> None:
        """What `for_acting` builds once the config is parsed: the policy, the flow
        context and the counters (`set_acting_state` loads a checkpoint's into them)."""
        self.acting_policy = self.build_policy()
        self.ctx = FlowContext(history=self.config.metrics_smoothing_episodes)
        self.iteration, self.time_total_s = 0, 0.0

    @property
    def acting_only(self) -> bool:
        """Whether this algorithm was made by `for_acting` (no cluster, cannot train)."""
        return getattr(self, "acting", False)

    def set_acting_state(self, state: dict[str, Any]) -> None:
        """Loads a checkpoint's policy and counters: all an acting-only algorithm needs
        (`set_state` loads them too, with the training state)."""
        self.check_algorithm(state)
        self.load_policy_state(state["policy"])
        self.iteration = int(state["iteration"])
        self.time_total_s = float(state["time_total_s"])

    def compute_single_action(self, observation, explore: bool = False, policy_id=None):
        """The action for one observation of the env (greedy unless ``explore``).

        Works the same on a training algorithm and on one from `hrl_tasks.load`;
        continuous actions are clipped to the action space. In a multi-agent env
        the observation is one agent's (PettingZoo's dict with ``action_mask`` for
        the classic games: only legal actions are chosen), and ``policy_id`` names
        the policy that acts (default: the shared one, when there is only one). A
        policy with a centralized critic acts on the agent's own observation.

        Raises:
            ValueError: for several policies and no ``policy_id``, or an unknown one.
        """
        policy = self.policy
        if isinstance(policy, PolicyMap):
            pid = policy.shared_policy if policy_id is None else policy_id
            if pid not in policy.policies:
                known = sorted(map(str, policy.policies))
                raise ValueError(
                    f"name the policy to act with: policy_id={policy_id!r} is not one of {known}"
                )
            policy, observation = policy[pid], policy_observation(observation)
            own = getattr(policy.observation_space, "own_size", 0)
            if own and observation.size == own:  # a centralized critic's actor: its own part
                state = policy.observation_space.shape[0] - own
                observation = np.concatenate([observation.ravel(), np.zeros(state, np.float32)])
        actions, _ = policy.compute_actions(np.asarray(observation)[None], explore=explore)
        action = actions[0]
        space = policy.action_space
        if hasattr(space, "low"):
            return np.clip(action, space.low, space.high)
        return action.item() if np.ndim(action) == 0 else action

    def num_rollout_workers(self) -> int:
        """Remote rollout workers to build; ES overrides it with 0 (its episodes are tasks)."""
        return self.config.num_workers

    def make_policy(self, observation_space, action_space):
        """The learner's policy (copied to every rollout worker)."""
        policy_config = self.config.pick(self.policy_config_class)
        return self.policy_class(observation_space, action_space, policy_config)

    @abc.abstractmethod
    def build_plan(self, workers: WorkerSet, ctx: FlowContext) -> LocalIterator:
        """The dataflow plan: an iterator of metrics dicts, one per iteration."""

    @property
    def policy(self):
        """The learner's policy (the one that acts in `compute_single_action`)."""
        if self.acting_only:
            return self.acting_policy
        return self.workers.local_worker.policy

    def check_can_train(self) -> None:
        """Raises EngineError on an algorithm made only to act (`hrl_tasks.load`)."""
        if self.acting_only:
            raise EngineError(
                f"this {self.name} was loaded to act, with no cluster; to train it, load it "
                "with hrl_tasks.load(path, train=True)"
            )

    def train(self) -> dict:
        """Run one iteration of the plan; returns its metrics dict."""
        self.check_can_train()
        start = time.perf_counter()
        metrics = next(self.plan)
        self.iteration += 1
        self.time_total_s += time.perf_counter() - start
        metrics.update(iteration=self.iteration, time_total_s=self.time_total_s)
        if self.config.on_train_result is not None:
            self.config.on_train_result(self, metrics)
        return metrics

    def evaluate(self, episodes: int | None = None) -> dict:
        """Episodes in the driver with deterministic actions: their mean return and length,
        and each episode's (``evaluation_returns``, ``evaluation_lengths``)."""
        episodes = episodes or self.config.evaluation_episodes
        if not self.acting_only:
            self.workers.pull_learner_weights()
        env = self.make_env()
        seed = None if self.config.seed is None else self.config.seed + 10_000
        obs, _ = env.reset(seed=seed)
        returns, total, length, lengths = [], 0.0, 0, []
        while len(returns) < episodes:
            actions, _ = self.policy.compute_actions(obs, explore=False)
            if hasattr(env.single_action_space, "low"):
                actions = np.clip(
                    actions, env.single_action_space.low, env.single_action_space.high
                )
            obs, reward, terminated, truncated, _ = env.step(actions)
            total += float(reward[0])
            length += 1
            if terminated[0] or truncated[0]:
                returns.append(total)
                lengths.append(length)
                total, length = 0.0, 0
        env.close()
        return {
            "evaluation_return_mean": float(np.mean(returns)),
            "evaluation_len_mean": float(np.mean(lengths)),
            "evaluation_episodes": episodes,
            "evaluation_returns": returns,
            "evaluation_lengths": lengths,
        }

    # --- checkpoints -----------------------------------------------------------

    def checkpoint_header(self) -> dict[str, Any]:
        """What every checkpoint starts with: format, versions, config and counters."""
        config = self.config.to_dict()
        if not isinstance(config["env"], str):  # a creator function: load(path, env=creator)
            config["env"] = env_name(config["env"])
        if config["policies"] is not None:  # spaces stay out: the agent they came from goes in
            agents = getattr(self, "policy_agents", {})
            config["policies"] = {
                str(pid): {
                    "algorithm": spec["algorithm"],
                    "config": dict(spec["config"]),
                    "agent": agents.get(pid, spec.get("agent")),
                }
                for pid, spec in config["policies"].items()
            }
        for key in ("policy_mapping_fn", "on_train_result"):  # code: give it again to resume
            config[key] = None
        return {
            "format": FORMAT,
            "version": __version__,
            "algorithm": self.name,
            "config": config,
            "iteration": self.iteration,
            "time_total_s": self.time_total_s,
        }

    def get_state(self) -> dict[str, Any]:
        if self.workers.learner_group is not None:
            self.workers.learner_group.pull_state()
        return {
            **self.checkpoint_header(),
            "policy": self.policy.get_state(),
            "flow": self.ctx.state(),
            "workers": self.workers.get_rng_states(),
        }

    def check_algorithm(self, state: dict[str, Any]) -> None:
        if state.get("algorithm") != self.name:
            raise CheckpointError(
                f"this checkpoint is of {state.get('algorithm')!r}, not {self.name!r}"
            )

    def load_policy_state(self, policy_state: Any) -> None:
        """Loads a checkpoint's ``policy`` entry, all or nothing.

        Raises:
            CheckpointError: If it does not fit (the policy is left as it was), naming
                ``policy_noun`` and suggesting ``policy_mismatch_hint``.
        """
        current = self.get_policy_state()
        try:
            self.set_policy_state(policy_state)
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            self.set_policy_state(current)  # nothing half-loaded
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise CheckpointError(
                f"the checkpoint's {self.policy_noun} does not fit this {self.name} "
                f"({self.policy_mismatch_hint}): {first_line}"
            ) from exc

    def get_policy_state(self) -> Any:
        """What `load_policy_state` puts back on a failure: ``policy.get_state()``."""
        return self.policy.get_state()

    def set_policy_state(self, policy_state: Any) -> None:
        """Loads a checkpoint's ``policy`` entry (`load_policy_state` makes it all or
        nothing): ``policy.set_state``."""
        self.policy.set_state(policy_state)

    def set_state(self, state: dict[str, Any]) -> None:
        self.check_algorithm(state)
        self.load_policy_state(state["policy"])
        if self.workers.learner_group is not None:
            self.workers.learner_group.push_state()
        self.ctx.restore(state["flow"])
        self.iteration = int(state["iteration"])
        self.time_total_s = float(state["time_total_s"])
        self.workers.sync_weights()
        self.workers.set_rng_states(state.get("workers", []))

    def save(self, path: str | os.PathLike) -> Path:
        """Write a checkpoint atomically (a crash mid-write leaves the old one intact)."""
        if self.acting_only:
            raise EngineError(
                f"this {self.name} was loaded to act; it has no training state to save"
            )
        return write_checkpoint(path, self.get_state())

    def restore(self, path: str | os.PathLike) -> None:
        """Continue from a checkpoint: weights, optimizer state, counters and iteration.

        Args:
            path: a checkpoint file, or a directory (its newest ``*.hrl`` file).

        Raises:
            CheckpointError: if the file is missing, corrupted or of another algorithm.
        """
        path = latest_checkpoint(path)
        try:
            self.set_state(read_checkpoint(path))
        except CheckpointError as exc:
            if str(path) in str(exc):
                raise
            raise CheckpointError(f"{path}: {exc}") from exc

    def stop(self) -> None:
        """Stop the plan's threads, the rollout workers, and the embedded cluster if this
        algorithm started it."""
        if self.acting_only:
            return
        plan = getattr(self, "plan", None)
        if plan is not None:
            with contextlib.suppress(ValueError):  # train() runs in another thread right now
                plan.close()
        self.workers.stop()
        if self.owns_engine:
            self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
