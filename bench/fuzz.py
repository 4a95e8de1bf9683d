"""Bad input, at scale: generated configs and damaged checkpoints, counted and timed.

The tests run the same generators with few examples (tests/algorithms/
test_config_fuzz.py, test_checkpoint.py); this runs many and prints one JSON line
per algorithm (configs: how many were accepted, how many rejected with a
one-line ConfigError naming the key, how many raised anything else, the slowest
check) and one for checkpoints (damaged copies of a real checkpoint: how many
were named in a CheckpointError, how many loaded). It also times
``Algorithm(config)`` failing on a negative learning rate, which must happen
before any cluster starts. Not part of CI.

    python bench/fuzz.py [--examples 2000]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import psutil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrl_tasks.algorithms import ALGORITHMS, ConfigError  # noqa: E402
from hrl_tasks.algorithms.checkpoint import (  # noqa: E402
    FORMAT,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from hrl_tasks.policies import PPOPolicy, PPOPolicyConfig  # noqa: E402
from tests.algorithms.test_config_fuzz import (  # noqa: E402
    assert_passes_every_check,
    config_dicts,
    names_an_offending_key,
)

SETTINGS = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck)}


def fuzz_configs(name: str, examples: int) -> dict:
    cls = ALGORITHMS[name].config_class
    counts = {"accepted": 0, "rejected_naming_the_key": 0, "other": 0}
    slowest = 0.0

    @settings(max_examples=examples, **SETTINGS)
    @given(config_dicts(cls))
    def check(values):
        nonlocal slowest
        start = time.perf_counter()
        try:
            config = cls.from_dict(values)
        except ConfigError as exc:
            message = str(exc)
            one_line = "\n" not in message and names_an_offending_key(message, cls, values)
            counts["rejected_naming_the_key" if one_line else "other"] += 1
        except Exception:  # what must never happen
            counts["other"] += 1
        else:
            assert_passes_every_check(config, values)
            counts["accepted"] += 1
        slowest = max(slowest, time.perf_counter() - start)

    check()
    return {
        "fuzz": "config",
        "algorithm": name,
        **counts,
        "slowest_check_ms": round(slowest * 1e3, 3),
    }


def fuzz_checkpoints(examples: int) -> dict:
    policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOPolicyConfig(seed=0))
    state = {"format": FORMAT, "algorithm": "ppo", "policy": policy.get_state(), "iteration": 7}
    folder = Path(tempfile.mkdtemp())
    data = write_checkpoint(folder / "good.hrl", state).read_bytes()
    counts = {"named": 0, "loaded": 0, "other": 0}
    damage = st.one_of(
        st.floats(0.0, 0.999).map(lambda f: data[: int(len(data) * f)]),
        st.tuples(st.integers(0, len(data) - 1), st.integers(1, 255)).map(
            lambda c: data[: c[0]] + bytes([data[c[0]] ^ c[1]]) + data[c[0] + 1 :]
        ),
        st.binary(min_size=1, max_size=64).map(lambda extra: data + extra),
    )

    @settings(max_examples=examples, **SETTINGS)
    @given(damage)
    def check(damaged):
        path = folder / "damaged.hrl"
        path.write_bytes(damaged)
        try:
            read_checkpoint(path)
            counts["loaded"] += 1
        except CheckpointError as exc:
            counts["named" if str(path) in str(exc) else "other"] += 1
        except Exception:
            counts["other"] += 1

    check()
    return {"fuzz": "checkpoint", "bytes": len(data), **counts}


def time_a_bad_learning_rate() -> dict:
    """``PPO({"lr": -1e-3})`` from the constructor call to the error, children counted."""
    children = len(psutil.Process().children(recursive=True))
    start = time.perf_counter()
    try:
        ALGORITHMS["ppo"]({"lr": -1e-3})
        raised = None
    except ConfigError as exc:
        raised = str(exc)
    return {"fuzz": "negative lr", "error": raised, "seconds": round(time.perf_counter() - start, 4),
            "processes_started": len(psutil.Process().children(recursive=True)) - children}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="per algorithm and checkpoints")
    args = parser.parse_args()
    print(json.dumps(time_a_bad_learning_rate()), flush=True)
    for name in sorted(ALGORITHMS):
        print(json.dumps(fuzz_configs(name, args.examples)), flush=True)
    print(json.dumps(fuzz_checkpoints(args.examples)), flush=True)


if __name__ == "__main__":
    main()
