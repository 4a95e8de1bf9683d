"""Creating environments: gymnasium ids, callables and registered names.

An env argument is one of (the one env-spec rule, for every algorithm and the CLI)

* a gymnasium id (``"CartPole-v1"``, or ``"module:Id-v0"`` to import the
  module that registers it first); an Atari id (``"ALE/Breakout-v5"``, any
  ``ALE/`` id of ale-py) gets the standard Atari wrappers of
  `hrl_tasks.envs.atari.make_atari` (uint8 observations ``(4, 84, 84)``), and
  ale-py is imported only for these ids; a MinAtar id (``"MinAtar/Breakout-v1"``)
  gets `hrl_tasks.envs.minatar.make_minatar` (uint8 observations ``(C, 10, 10)``);
* a name registered with `register_env` (kept in gymnasium's own registry,
  so ``gymnasium.make(name)`` works too);
* a PettingZoo env by name (``"tictactoe_v3"``, ``"connect_four_v3"``: looked
  up among PettingZoo's families) or by module path (``"pettingzoo.classic.tictactoe_v3"``,
  or any module with ``env()`` or ``parallel_env()``); `resolve_env` makes it a
  `PettingZooSpec`;
* a callable returning an env (an env class works);
* a ``gymnasium.envs.registration.EnvSpec`` (what `resolve_env` makes of a
  registered name, so that it can travel to other processes).

Gymnasium ids win over PettingZoo names. Single-agent algorithms refuse
PettingZoo envs with `MultiAgentEnvError`.

An env id read from a file (a checkpoint's config, a recording's metadata) may
import only modules that an installed distribution provides
(`check_env_from_file`): ``module:Id`` and a dotted PettingZoo path import their
module, which runs its code, so a file naming a module of the working directory
is refused unless its reader is told to trust it (``trust_env_modules=True``,
``hrl-tasks train --trust-env-modules``). Ids the user gives are not checked.

``env_config`` is passed as keyword arguments: to ``gymnasium.make`` for ids,
names and specs, to `make_atari` for ``ALE/`` ids (its wrappers' options, e.g.
``clip_rewards=False``, and ``gymnasium.make``'s), and to the callable
otherwise. `make_env` builds a ``SyncVectorEnv`` with same-step autoreset:
when a sub-env ends an episode, the step returns the first observation of the
next one and puts the last one in ``infos["final_obs"]``, which is what
bootstrapping on truncation needs::

    envs = make_env("CartPole-v1", num_envs=4, seed=0)
    obs, _ = envs.reset()
    obs, rewards, terminateds, truncateds, infos = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Callable, Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector.utils import concatenate, iterate

from hrl_tasks.data.rng import generator_from_state, generator_state
from hrl_tasks.envs.atari import INSTALL_HINT, is_ale_id, make_atari, register_ale
from hrl_tasks.envs.minatar import is_minatar_id, make_minatar, register_minatar
from hrl_tasks.errors import ConfigError

PETTINGZOO_FAMILIES = ("classic", "butterfly", "sisl", "atari")


@dataclass(frozen=True)
class PettingZooSpec:
    """A PettingZoo env by its module: ``make()`` is its ``env()`` (AEC),
    ``make_parallel()`` its ``parallel_env()``; both take ``env_config`` keys."""

    module: str

    @property
    def name(self) -> str:
        """The module's last part, e.g. ``tictactoe_v3``."""
        return self.module.rpartition(".")[2]

    def make(self, **config: Any):
        return importlib.import_module(self.module).env(**config)

    def make_parallel(self, **config: Any):
        """Raises ValueError for turn-based envs, which have no ``parallel_env()``."""
        module = importlib.import_module(self.module)
        if not callable(getattr(module, "parallel_env", None)):
            raise ValueError(f"{self.name!r} is turn-based: its module has no parallel_env()")
        return module.parallel_env(**config)


EnvLike = str | EnvSpec | PettingZooSpec | Callable[..., gym.Env]


class UnknownEnvError(ValueError):
    """An env spec that names no gymnasium env, registered name or PettingZoo env."""


class MissingEnvPackageError(UnknownEnvError):
    """A gymnasium id whose env needs a package that is not installed (MuJoCo's, Box2D's)."""


EXTRAS_OF_ENTRY_POINTS = {"gymnasium.envs.mujoco": "mujoco"}
"""The extra of hrl_tasks that installs what envs of these modules need."""


class MultiAgentEnvError(ValueError):
    """A PettingZoo (multi-agent) env given to a single-agent algorithm."""


class UntrustedEnvError(ConfigError):
    """An env id read from a file that would import a module no installed distribution
    provides."""


def check_env_from_file(env: Any, source: str | os.PathLike, trust: bool = False) -> None:
    """Refuses an env id read from ``source`` that would import a module no installed
    distribution provides.

    Resolving ``module:Id`` imports ``module``, and a dotted PettingZoo path its
    package: importing runs the module's code, so an id read from a file may import
    only a module that an installed distribution provides, found where it was
    installed (not a file of the working directory, or of the script's, that shadows
    it). Registered gymnasium ids, ALE ids and PettingZoo names import nothing else.

    Args:
        env: The id as read (what is not a string is left to `resolve_env`).
        source: The file it was read from, for the message.
        trust: Accept any id: the file is trusted as code is.

    Raises:
        UntrustedEnvError: Naming the id, ``source`` and how to allow it.
    """
    if trust or not isinstance(env, str):
        return
    module = imported_module(env)
    if module is None or installed_module(module):
        return
    raise UntrustedEnvError(
        f"{os.fspath(source)}: its env {env!r} would import the module {module!r}, which is "
        "not one of an installed distribution (a file of the working directory, say), and "
        "importing runs its code. If you trust this file, allow it with "
        "trust_env_modules=True (hrl_tasks.load) or --trust-env-modules (hrl-tasks train, tune), "
        "or name the env yourself (env=..., --env)"
    )


def imported_module(env_id: str) -> str | None:
    """The module resolving ``env_id`` imports by its name: ``module`` of ``module:Id``,
    the id itself for a dotted id gymnasium has not registered (a PettingZoo module
    path); None for the others. Pure."""
    if ":" in env_id:
        return env_id.partition(":")[0]
    if "." in env_id and env_id not in gym.registry:
        return env_id
    return None


def installed_module(module: str) -> bool:
    """Whether ``module``'s top-level package is one an installed distribution provides,
    found where the import system finds it once the working directory and the script's
    directory are left out of ``sys.path`` (a file there must not shadow it)."""
    top = module.partition(".")[0]
    if not top or top not in importlib.metadata.packages_distributions():
        return False
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    installed = find_outside(top, [entry for entry in sys.path if not local_entry(entry)])
    return found is not None and installed is not None and where(found) == where(installed)


def local_entry(entry: str) -> bool:
    """Whether a ``sys.path`` entry is the working directory or the script's directory."""
    if entry in ("", ".") or (sys.path and entry == sys.path[0]):
        return True
    try:
        return os.path.realpath(entry) == os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed: nothing can be found in it
        return False


def find_outside(name: str, path: list[str]):
    """The spec the import system would find for the top-level ``name`` with ``path`` as
    ``sys.path`` (the meta path's finders in their order, the path finder on ``path``)."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        on_path = finder is importlib.machinery.PathFinder
        with contextlib.suppress(ImportError, ValueError):
            spec = find(name, path) if on_path else find(name, None)
            if spec is not None:
                return spec
    return None


def where(spec) -> tuple:
    """Where a module spec's code lies: its file, or a namespace package's directories."""
    return spec.origin, tuple(spec.submodule_search_locations or ())


def register_env(name: str, creator: Callable[..., gym.Env], **spec_kwargs: Any) -> None:
    """Registers ``creator`` under ``name`` in gymnasium's registry.

    Registration is per process: pass the name to `resolve_env` (a
    `WorkerSet` does) before sending it to other processes.

    Args:
        name: The id, e.g. ``"MyEnv-v0"``; registering a name again replaces it.
        creator: Called with the ``env_config`` entries as keyword arguments.
        **spec_kwargs: Passed to ``gymnasium.register``, e.g. ``max_episode_steps``.

    Raises:
        TypeError: If ``creator`` is not callable.
    """
    if not callable(creator):
        raise TypeError(f"register_env needs a callable creator, got {creator!r}")
    gym.registry.pop(name, None)  # gymnasium warns on overriding; replacing is intended here
    gym.register(id=name, entry_point=creator, **spec_kwargs)


def resolve_env(env: EnvLike) -> EnvLike:
    """Checks an env argument and makes it portable to other processes.

    Args:
        env: A gymnasium id, a registered name, a PettingZoo name or module
            path, an ``EnvSpec``, a `PettingZooSpec` or a callable.

    Returns:
        ``env`` itself, except that a name whose entry point is a callable
        (registered with `register_env` in this process) becomes its
        ``EnvSpec``, which pickles with the callable inside, and a PettingZoo
        name becomes its `PettingZooSpec`.

    Raises:
        UnknownEnvError: If ``env`` is a string that names no env; the
            message suggests the nearest known ids.
        TypeError: If ``env`` is neither a string, a spec nor a callable.
    """
    if isinstance(env, EnvSpec | PettingZooSpec) or (callable(env) and not isinstance(env, str)):
        return env
    if not isinstance(env, str):
        raise TypeError(
            f"env must be an id, a PettingZoo name, an EnvSpec or a callable, got {env!r}"
        )
    env_id = env
    if ":" in env:
        module, _, env_id = env.partition(":")
        importlib.import_module(module)
    elif is_ale_id(env_id):
        _registered(register_ale)
    elif is_minatar_id(env_id):
        _registered(register_minatar)
    elif env_id not in gym.registry:
        found = find_pettingzoo(env_id)
        if found is not None:
            return found
    if env_id not in gym.registry:
        known = [*gym.registry, *pettingzoo_names()]
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        if is_ale_id(env_id):
            raise UnknownEnvError(
                f"unknown env {env_id!r}{hint} (not an id of the installed ale-py; ALE ids "
                f"and their ROMs come with it: {INSTALL_HINT})"
            )
        if is_minatar_id(env_id):
            raise UnknownEnvError(
                f"unknown env {env_id!r}{hint} (not an id of the installed minatar: "
                "Asterix, Breakout, Freeway, Seaquest or SpaceInvaders, -v0 or -v1)"
            )
        raise UnknownEnvError(
            f"unknown env {env_id!r}{hint} (a gymnasium id, a PettingZoo env such as "
            "'tictactoe_v3', or register your own with hrl_tasks.rollout.register_env(name, "
            "creator))"
        )
    spec = gym.registry[env_id]
    return spec if callable(spec.entry_point) else env


def _registered(register: Callable[[], None]) -> None:
    """``register()``, a missing package raised as an `UnknownEnvError` (one line in the CLI)."""
    try:
        register()
    except ModuleNotFoundError as exc:
        raise UnknownEnvError(str(exc)) from exc


def find_pettingzoo(name: str) -> PettingZooSpec | None:
    """The PettingZoo env ``name`` means (a module path, or a name in one of
    PettingZoo's families), or None."""
    candidates = [name] if "." in name else [f"pettingzoo.{f}.{name}" for f in PETTINGZOO_FAMILIES]
    for module_name in candidates:
        try:
            if importlib.util.find_spec(module_name) is None:
                continue
        except (ImportError, ValueError):  # a parent package is missing
            continue
        module = importlib.import_module(module_name)
        if callable(getattr(module, "env", None)) or callable(
            getattr(module, "parallel_env", None)
        ):
            return PettingZooSpec(module_name)
    if "." not in name and importlib.util.find_spec("pettingzoo") is None and name[-3:-1] == "_v":
        raise UnknownEnvError(
            f"{name!r} looks like a PettingZoo env, and PettingZoo is not installed: "
            "pip install 'hrl_tasks[games]'"
        )
    return None


def pettingzoo_names() -> list[str]:
    """The env names in PettingZoo's families (for suggestions), without importing them."""
    names = []
    for family in PETTINGZOO_FAMILIES:
        try:
            spec = importlib.util.find_spec(f"pettingzoo.{family}")
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            found = pkgutil.iter_modules(spec.submodule_search_locations)
            names += [m.name for m in found if m.name[-3:-1] == "_v"]
    return names


def require_single_agent(env: EnvLike, algorithm: str) -> None:
    """Raises `MultiAgentEnvError` if ``env`` resolves to a PettingZoo env."""
    resolved = resolve_env(env)
    if isinstance(resolved, PettingZooSpec):
        raise MultiAgentEnvError(
            f"{algorithm} trains single-agent gymnasium envs, and {resolved.name!r} is a "
            "PettingZoo (multi-agent) env: train it with ppo, dqn or composition (policies of "
            "several algorithms), or plan in turn-based games with alphazero"
        )


def env_creator(env: EnvLike, env_config: Mapping[str, Any] | None = None) -> Callable[[], gym.Env]:
    """A zero-argument function that builds one (unvectorized) env.

    Args:
        env: A gymnasium id, a registered name, an ``EnvSpec`` or a callable;
            an ``ALE/`` id is built by `make_atari`.
        env_config: Keyword arguments for ``gymnasium.make``, `make_atari` or the callable.

    Raises:
        UnknownEnvError: If ``env`` is an unknown id.
    """
    env = resolve_env(env)
    config = dict(env_config or {})
    if isinstance(env, PettingZooSpec):
        raise MultiAgentEnvError(
            f"{env.name!r} is a PettingZoo (multi-agent) env; a gymnasium env is needed here"
        )
    if is_ale_id(env):
        return functools.partial(make_atari, env, **config)
    if is_minatar_id(env):
        return functools.partial(make_minatar, env, **config)
    if isinstance(env, str | EnvSpec):
        return functools.partial(gym_make, env, **config)
    return functools.partial(_call_creator, env, config)


def gym_make(env: str | EnvSpec, **config: Any) -> gym.Env:
    """``gymnasium.make``; an env whose package is missing (``mujoco`` for MuJoCo's)
    raises `MissingEnvPackageError` naming the install command."""
    try:
        return gym.make(env, **config)
    except gym.error.DependencyNotInstalled as exc:
        spec = env if isinstance(env, EnvSpec) else gym.spec(env)
        module = str(spec.entry_point).partition(":")[0]
        extra = next((e for m, e in EXTRAS_OF_ENTRY_POINTS.items() if module.startswith(m)), None)
        how = f"pip install 'hrl_tasks[{extra}]'" if extra else str(exc).strip().splitlines()[0]
        raise MissingEnvPackageError(
            f"{spec.id} needs a package that is not installed: {how}"
        ) from exc


def _call_creator(creator: Callable[..., gym.Env], config: dict[str, Any]) -> gym.Env:
    made = creator(**config)
    if not isinstance(made, gym.Env):
        raise TypeError(f"env creator {creator!r} returned {type(made).__name__}, not a gym.Env")
    return made


def make_env(
    env: EnvLike,
    num_envs: int = 1,
    seed: int | None = None,
    env_config: Mapping[str, Any] | None = None,
    *,
    catch_errors: bool = False,
    max_errors_in_a_row: int = 3,
    backend: str = "gymnasium",
) -> gym.vector.VectorEnv:
    """Builds a `SameStepVectorEnv` (a ``SyncVectorEnv``) of ``num_envs`` copies, or
    with ``backend="envpool"`` an `~hrl_tasks.envs.envpool_backend.EnvPoolVectorEnv`
    of EnvPool's env of that id (same-step autoreset too; ``env_config`` for
    ``envpool.make_gymnasium``; ``catch_errors`` does not apply).

    Args:
        env: A gymnasium id, a registered name, an ``EnvSpec`` or a callable.
        num_envs: Sub-envs, stepped in this process one after the other.
        seed: If given, the env is reset once with it (sub-env ``i`` gets
            ``seed + i``) and its spaces are seeded, so what follows is
            reproducible; the caller still calls ``reset()`` to start.
        env_config: Keyword arguments for ``gymnasium.make`` or the callable.
        catch_errors: Wrap each sub-env in `CatchEnvErrors`: a step that
            raises ends the episode as a truncation and the env is built
            again, up to ``max_errors_in_a_row`` failures in a row.
        max_errors_in_a_row: See `CatchEnvErrors`.

    Returns:
        The vector env.

    Raises:
        UnknownEnvError: If ``env`` is an unknown id (before anything is built).
        ValueError: If ``num_envs`` is not positive.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if backend == "envpool":
        from hrl_tasks.envs.envpool_backend import EnvPoolVectorEnv

        if not isinstance(env, str):
            raise TypeError(f"env_backend='envpool' makes envs by id, got {env!r}")
        vector = EnvPoolVectorEnv(env, num_envs, env_config=dict(env_config or {}))
        if seed is not None:
            vector.reset(seed=seed)
        return vector
    create = env_creator(env, env_config)
    if catch_errors:
        create = functools.partial(_guarded, create, env_name(env), max_errors_in_a_row)
    vector = SameStepVectorEnv([create] * num_envs)
    if seed is not None:
        vector.reset(seed=seed)
        vector.action_space.seed(seed)
        vector.observation_space.seed(seed)
    return vector


def _guarded(create: Callable[[], gym.Env], name: str, max_errors_in_a_row: int) -> gym.Env:
    return CatchEnvErrors(create, name=name, max_errors_in_a_row=max_errors_in_a_row)


class EnvError(ValueError):
    """An env that keeps raising, or returns what its spaces say it cannot."""


def env_name(env: EnvLike) -> str:
    """How messages name an env: its id, or its creator's name."""
    if isinstance(env, str):
        return env
    if isinstance(env, EnvSpec):
        return env.id
    if isinstance(env, PettingZooSpec):
        return env.name
    return getattr(env, "__qualname__", None) or repr(env)


class CatchEnvErrors(gym.Wrapper):
    """Re-creates an env whose ``step`` or ``reset`` raises, and counts what it raised.

    A failed step returns the last observation, reward 0, ``truncated=True``
    and ``info["env_error"]`` (the error's repr), and the env is closed and
    built again from ``create`` (an env that raised may be left broken); the
    vector env then resets it as after any episode end. A failed reset is
    tried again on a new env. More than ``max_errors_in_a_row`` failures
    without a good step in between raise `EnvError`, with the last error as
    its cause. An observation whose shape is not the observation space's
    (checked at each reset and the step after it) raises `EnvError` at once.

    Args:
        create: Builds the env (called again after each failure).
        name: How messages name the env.
        max_errors_in_a_row: Failures in a row tolerated before giving up.

    Attributes:
        num_errors: Steps and resets that raised so far.
    """

    def __init__(
        self, create: Callable[[], gym.Env], name: str = "env", max_errors_in_a_row: int = 3
    ) -> None:
        super().__init__(create())
        if max_errors_in_a_row < 0:
            raise ValueError(f"max_errors_in_a_row must be >= 0, got {max_errors_in_a_row}")
        self.create, self.name = create, name
        self.max_errors_in_a_row = max_errors_in_a_row
        self.num_errors = 0
        self.errors_in_a_row = 0
        self._last_obs: Any = None
        self._check_next_step = True

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        while True:
            try:
                obs, info = self.env.reset(**kwargs)
                break
            except Exception as exc:
                self._failed("reset", exc)
        self._check_shape(obs, "reset")
        self._last_obs, self._check_next_step = obs, True
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            self._failed("step", exc)
            return self._last_obs, 0.0, False, True, {"env_error": repr(exc)}
        if self._check_next_step:
            self._check_shape(obs, "step")
            self._check_next_step = False
        self.errors_in_a_row = 0
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _failed(self, during: str, exc: Exception) -> None:
        """Count the failure, give up past the limit, else build the env again."""
        self.num_errors += 1
        self.errors_in_a_row += 1
        if self.errors_in_a_row > self.max_errors_in_a_row:
            raise EnvError(
                f"env {self.name!r} raised in {during} {self.errors_in_a_row} times in a row, "
                f"each time re-created (max_env_errors={self.max_errors_in_a_row}): {exc!r}"
            ) from exc
        rng = self.env.unwrapped.np_random  # the new env continues the old one's stream
        with contextlib.suppress(Exception):
            self.env.close()
        self.env = self.create()
        self.env.unwrapped.np_random = rng

    def _check_shape(self, obs: Any, during: str) -> None:
        space = self.observation_space
        if isinstance(space, gym.spaces.Box) and np.shape(obs) != space.shape:
            raise EnvError(
                f"env {self.name!r} returned an observation of shape {np.shape(obs)} from "
                f"{during}, but its observation_space is {space}"
            )


class SameStepVectorEnv(gym.vector.SyncVectorEnv):
    """Gymnasium's ``SyncVectorEnv`` with same-step autoreset and a leaner ``step``.

    The results are those of ``SyncVectorEnv(env_fns, autoreset_mode=SAME_STEP)``:
    an episode's last observation goes to ``infos["final_obs"]`` (an object
    array, with the mask ``infos["_final_obs"]``), its info to
    ``infos["final_info"]``, and the step returns the first observation of
    the next episode. Sampling steps envs like CartPole in a few microseconds,
    so the parent's per-step costs show: this ``step`` merges an info only
    when a sub-env returns a non-empty one, builds the final-observation
    arrays directly, and copies an array observation with ``ndarray.copy``
    instead of ``deepcopy``. It relies on the parent's buffers (``_env_obs``,
    ``_observations``, ``_rewards``, ``_terminations``, ``_truncations``);
    ``test_same_step_vector_env_matches_gymnasium`` compares the two.
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]], copy: bool = True) -> None:
        super().__init__(env_fns, copy=copy, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    # What the rollout workers read of their vector env (EnvPool's has them too) ------

    def errors_of(self, i: int) -> int:
        """The errors sub-env ``i`` raised so far (`CatchEnvErrors`; 0 without it)."""
        return getattr(self.envs[i], "num_errors", 0)

    def rng_states(self) -> list:
        """Each sub-env's random-number generator state, as plain data."""
        return [generator_state(env.unwrapped.np_random) for env in self.envs]

    def set_rng_states(self, states: list) -> None:
        """Restores `rng_states` (as many sub-envs as both have)."""
        for env, state in zip(self.envs, states, strict=False):
            env.unwrapped.np_random = generator_from_state(state)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every sub-env once; one that ends an episode is reset at once."""
        infos: dict[str, Any] = {}
        final_obs = final_mask = final_info = None
        for i, (env, action) in enumerate(
            zip(self.envs, iterate(self.action_space, actions), strict=True)
        ):
            obs, reward, terminated, truncated, info = env.step(action)
            self._rewards[i], self._terminations[i], self._truncations[i] = (
                reward,
                terminated,
                truncated,
            )
            if terminated or truncated:
                if final_obs is None:
                    final_obs = np.full(self.num_envs, None, dtype=object)
                    final_mask = np.zeros(self.num_envs, dtype=bool)
                    final_info = {}
                final_obs[i], final_mask[i] = obs, True
                if info:
                    final_info = self._add_info(final_info, info, i)
                obs, info = env.reset()
            if info:
                infos = self._add_info(infos, info, i)
            self._env_obs[i] = obs
        if final_obs is not None:
            infos.update(
                final_obs=final_obs,
                _final_obs=final_mask,
                final_info=final_info,
                _final_info=final_mask,
            )
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        if not self.copy:
            observations = self._observations
        elif isinstance(self._observations, np.ndarray):
            observations = self._observations.copy()
        else:
            observations = deepcopy(self._observations)
        return (
            observations,
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )
