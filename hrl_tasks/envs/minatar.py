"""MinAtar (Young and Tian 2019, https://arxiv.org/abs/1903.03176): Atari's dynamics on
10x10 grids, the small benchmark of value-based methods.

``MinAtar/Breakout-v1`` and the other ids of the ``minatar`` package (Asterix,
Breakout, Freeway, Seaquest, SpaceInvaders; ``-v0`` with every action, ``-v1`` with
each game's minimal set) train by name. `make_minatar` makes one and turns its
observations, bool ``(10, 10, C)`` planes, into uint8 ``(C, 10, 10)`` with values 0
and 1, which the policies' `SmallCNN` takes (channels first, as the paper's network
does)::

    env = make_minatar("MinAtar/Breakout-v1")
    obs, _ = env.reset(seed=0)  # obs.shape == (4, 10, 10), obs.dtype == uint8

The games keep the package's defaults: sticky actions with probability 0.1, as in
the paper. The env-spec rule (`hrl_tasks.envs.make`) applies this to every
``MinAtar/`` id, with ``env_config`` as ``gymnasium.make``'s keyword arguments.
Nothing imports minatar until such an id is made (`register_minatar`, in each
process that makes one).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import gymnasium as gym
import numpy as np

MINATAR_PREFIX = "MinAtar/"
INSTALL_HINT = "pip install 'hrl_tasks[minatar]'"


def is_minatar_id(env: object) -> bool:
    """Whether ``env`` is a ``MinAtar/...`` id (also as ``"module:MinAtar/..."``)."""
    return isinstance(env, str) and env.rpartition(":")[2].startswith(MINATAR_PREFIX)


def register_minatar() -> None:
    """Registers the ``minatar`` package's ids in this process's gymnasium registry.

    Raises:
        ModuleNotFoundError: If minatar is not installed; the message says what to install.
    """
    if "MinAtar/Breakout-v1" in gym.registry:
        return
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # its gym module warns when seaborn (for rendering) is absent
    try:
        module = importlib.import_module("minatar.gym")
    except ModuleNotFoundError as exc:
        if exc.name not in ("minatar", "minatar.gym"):
            raise
        raise ModuleNotFoundError(
            f"MinAtar ids need the minatar package, which is not installed: {INSTALL_HINT}",
            name="minatar",
        ) from exc
    finally:
        logging.disable(previous)
    module.register_envs()


class ChannelsFirst(gym.ObservationWrapper):
    """Bool ``(H, W, C)`` planes as uint8 ``(C, H, W)`` of 0 and 1 (a `PlanesBox`)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        from hrl_tasks.policies.spaces import PlanesBox  # read by the models' encoder choice

        height, width, channels = env.observation_space.shape
        self.observation_space = PlanesBox((channels, height, width))

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0), dtype=np.uint8)


def make_minatar(env_id: str, **config: Any) -> gym.Env:
    """A MinAtar game with channels-first uint8 observations (see the module)."""
    register_minatar()
    return ChannelsFirst(gym.make(env_id.rpartition(":")[2], **config))
