"""Atari through gymnasium's ALE, with the standard preprocessing of Mnih et al. 2015.

`make_atari` builds an ``ALE/...`` id (from ale-py, whose wheel ships the ROMs)
and wraps it as DQN's Nature paper and Stable-Baselines3's ``AtariWrapper`` do,
with gymnasium's own wrappers:

* ``AtariPreprocessing``: up to 30 no-op actions at reset, frame skip 4 with
  max-pooling over the last two frames, optional end of the episode on a lost
  life, greyscale, resized to 84x84;
* ``ClipReward``: rewards clipped to [-1, 1] (for training);
* ``FrameStackObservation``: the last 4 frames, channels first.

Observations are uint8 ``(4, 84, 84)``, which the policies' `CNN` takes as
channels-first images (scaled to [0, 1] in its forward pass)::

    env = make_atari("ALE/Breakout-v5")
    obs, _ = env.reset(seed=0)  # obs.shape == (4, 84, 84), obs.dtype == uint8

The env-spec rule (`hrl_tasks.envs.make`) applies it to every ``ALE/`` id,
with ``env_config`` as its keyword arguments. Nothing imports ale-py until an
``ALE/`` id is made (`register_ale`, in each process that makes one).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

ALE_PREFIX = "ALE/"
INSTALL_HINT = "pip install 'hrl_tasks[atari]' (ale-py, which ships the ROMs, and OpenCV)"
REQUIRED_MODULES = {"ale_py": "ale-py", "cv2": "opencv-python-headless"}  # module: package


def is_ale_id(env: object) -> bool:
    """Whether ``env`` is an ``ALE/...`` id (also as ``"module:ALE/..."``)."""
    return isinstance(env, str) and env.rpartition(":")[2].startswith(ALE_PREFIX)


def register_ale() -> None:
    """Registers ale-py's ids (``ALE/Breakout-v5``, ...) in this process's gymnasium registry.

    Raises:
        ModuleNotFoundError: If ale-py, or OpenCV (which ``AtariPreprocessing``
            resizes with), is not installed; the message says what to install.
    """
    for module, package in REQUIRED_MODULES.items():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the package is there, one of its own imports failed
                raise
            raise ModuleNotFoundError(
                f"ALE ids need {package}, which is not installed: {INSTALL_HINT}", name=module
            ) from exc
    gym.register_envs(sys.modules["ale_py"])


def make_atari(
    env_id: str,
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    terminal_on_life_loss: bool = False,
    clip_rewards: bool = True,
    frame_stack: int = 4,
    **make_kwargs: Any,
) -> gym.Env:
    """Builds an ALE env with the standard Atari wrappers.

    The underlying env is made with ``frameskip=1`` (``AtariPreprocessing``
    skips frames itself) and ale-py's other defaults for the id (``v5``:
    sticky actions with probability 0.25, the minimal action set).

    Args:
        env_id: An ``ALE/...`` id, e.g. ``"ALE/Breakout-v5"``.
        noop_max: Most no-op actions at reset (a random number, 0 to this).
        frame_skip: Frames an action repeats; the observation is the max of the last two.
        screen_size: Side of the square greyscale observation.
        terminal_on_life_loss: End the episode when a life is lost (the next
            reset starts a new game).
        clip_rewards: Clip rewards to [-1, 1] (training); False keeps the game's score.
        frame_stack: Frames stacked along the first axis; 1 still adds that axis.
        **make_kwargs: Passed to ``gymnasium.make``, e.g. ``repeat_action_probability``,
            ``full_action_space``, ``mode``, ``difficulty``.

    Returns:
        The wrapped env: uint8 observations ``(frame_stack, screen_size, screen_size)``.

    Raises:
        ModuleNotFoundError: If ale-py is not installed.
        gymnasium.error.Error: If ale-py has no such id.
    """
    register_ale()
    env = gym.make(env_id, frameskip=1, **make_kwargs)
    env = AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
    )
    if clip_rewards:
        env = ClipReward(env, -1.0, 1.0)
    return FrameStackObservation(env, frame_stack)
