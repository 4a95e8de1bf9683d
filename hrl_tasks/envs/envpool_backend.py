"""EnvPool (Weng et al. 2022, https://arxiv.org/abs/2206.10558) as the rollout workers'
vector env: C++ envs stepped in EnvPool's thread pool instead of gymnasium's.

``env_backend="envpool"`` (a config key) makes each rollout worker's envs an
`EnvPoolVectorEnv` of the same id (``CartPole-v1``, ``Pendulum-v1``, Atari's
``Breakout-v5``, MuJoCo's ``HalfCheetah-v4``, ...: `envpool.list_all_envs()`), with
``env_config`` as ``envpool.make_gymnasium``'s keyword arguments. The id keeps its
meaning: ``envpool:CartPole-v1`` still means "import envpool, then make gymnasium's
CartPole-v1" (README's ``module:Id`` rule), not this backend.

The rollout workers reset an env in the step its episode ends (the last observation
in ``infos["final_obs"]``, as `SameStepVectorEnv` does), where EnvPool resets it at
the next step (its "next-step" autoreset: that step's action is dropped). The match:
after each step, the envs that ended are reset at once (``reset(env_id=...)``), their
first observations put in the ones returned; EnvPool then steps them as any other.
EnvPool's own random numbers live in C++: the pool is seeded when it is built, at
the first ``reset`` (``seed + i`` for env ``i``); a checkpoint does not hold them.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np

INSTALL_HINT = "pip install 'hrl_tasks[envpool]'"
BACKENDS = ("gymnasium", "envpool")
"""The values of ``env_backend``."""


def import_envpool():
    """The envpool module.

    Raises:
        ModuleNotFoundError: If it is not installed; the message says what to install.
    """
    try:
        return importlib.import_module("envpool")
    except ModuleNotFoundError as exc:
        if exc.name != "envpool":
            raise
        raise ModuleNotFoundError(
            f"env_backend='envpool' needs the envpool package, which is not installed: "
            f"{INSTALL_HINT}",
            name="envpool",
        ) from exc


def envpool_ids() -> list[str]:
    """Every id EnvPool makes."""
    return list(import_envpool().list_all_envs())


def nearest(env_id: str, known: list[str]) -> str:
    """The end of a message for an id EnvPool does not know: its nearest ids. Pure."""
    import difflib

    close = difflib.get_close_matches(str(env_id), known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"{hint} (envpool.list_all_envs())"


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` envs of EnvPool id ``env_id``, with same-step autoreset (see the
    module), for `hrl_tasks.envs.make.make_env`.

    Args:
        env_id: An EnvPool id.
        num_envs: Envs in the pool.
        num_threads: EnvPool's threads (0: one per env, EnvPool's default); a rollout
            worker process takes 1 (it is one process on one core).
        env_config: Keyword arguments for ``envpool.make_gymnasium``.

    Raises:
        ValueError: If EnvPool does not know ``env_id`` (naming the nearest ids).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        num_threads: int = 1,
        env_config: dict[str, Any] | None = None,
    ) -> None:
        envpool = import_envpool()
        known = envpool.list_all_envs()
        if env_id not in known:
            raise ValueError(f"EnvPool has no env {env_id!r}{nearest(env_id, known)}")
        self.env_id, self.num_envs = env_id, int(num_envs)
        self.options = dict(
            num_envs=self.num_envs, num_threads=int(num_threads), **(env_config or {})
        )
        self.pool = None  # built at the first reset, with its seed
        spec = envpool.make_spec(env_id, **self.options)
        self.single_observation_space = spec.gymnasium_observation_space
        self.single_action_space = spec.gymnasium_action_space
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Build the pool (seeded with ``seed``, or randomly) if it is not, and reset
        every env: ``(obs, {})``."""
        if self.pool is None or seed is not None:
            if self.pool is not None:
                self.pool.close()
            envpool = import_envpool()
            drawn = int(np.random.SeedSequence(seed).generate_state(1)[0] >> 1)
            self.pool = envpool.make_gymnasium(self.env_id, seed=drawn, **self.options)
        obs, _ = self.pool.reset()
        return np.array(obs), {}

    def step(self, actions):
        """Step every env; one whose episode ended is reset in the same step."""
        obs, rewards, terminateds, truncateds, _ = self.pool.step(np.asarray(actions))
        obs = np.array(obs)  # EnvPool's arrays may be views of buffers it fills again
        infos: dict[str, Any] = {}
        ended = np.flatnonzero(terminateds | truncateds)
        if len(ended):
            final_obs = np.full(self.num_envs, None, dtype=object)
            final_mask = np.zeros(self.num_envs, dtype=bool)
            for i in ended:
                final_obs[i] = obs[i].copy()
            final_mask[ended] = True
            first, info = self.pool.reset(env_id=ended)
            obs[np.asarray(info["env_id"])] = first
            infos.update(final_obs=final_obs, _final_obs=final_mask)
        return obs, rewards.astype(np.float64), np.array(terminateds), np.array(truncateds), infos

    # The protocol of `SameStepVectorEnv` the rollout workers read --------------------

    def errors_of(self, i: int) -> int:
        """Env errors of env ``i`` so far: none are caught inside EnvPool."""
        return 0

    def rng_states(self) -> list:
        """Nothing: EnvPool's random numbers are not reachable from Python."""
        return []

    def set_rng_states(self, states: list) -> None:
        """Nothing to restore (see `rng_states`)."""

    def close(self, **kwargs) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
