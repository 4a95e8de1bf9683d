"""MuJoCo tasks by their gymnasium ids (the ``mujoco`` extra), and a clear line without it."""

import subprocess
import sys

import numpy as np
import pytest

from hrl_tasks.envs import make_env

pytest.importorskip("mujoco", reason="the mujoco extra: pip install 'hrl_tasks[mujoco]'")

SHAPES = {"HalfCheetah-v5": (17, 6), "Hopper-v5": (11, 3), "Walker2d-v5": (17, 6),
          "Ant-v5": (105, 8)}  # fmt: skip


@pytest.mark.parametrize("env_id", sorted(SHAPES))
def test_mujoco_ids_build_and_step(env_id):
    env = make_env(env_id, num_envs=2, seed=0)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, SHAPES[env_id][0])
        assert env.single_action_space.shape == (SHAPES[env_id][1],)
        obs, rewards, *_ = env.step(np.zeros((2, SHAPES[env_id][1]), np.float32))
        assert np.all(np.isfinite(obs)) and rewards.shape == (2,)
    finally:
        env.close()


def test_a_mujoco_id_without_the_package_names_the_extra():
    # A process in which `import mujoco` fails, as where the extra is not installed.
    code = (
        "import sys; sys.modules['mujoco'] = None\n"
        "from hrl_tasks.envs import make_env\n"
        "try:\n    make_env('Hopper-v5')\n"
        "except ValueError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == ("MissingEnvPackageError Hopper-v5 needs a package that is not "
                                  "installed: pip install 'hrl_tasks[mujoco]'"), out.stderr  # fmt: skip
