"""numpy generators' states as plain data (their 128-bit integers as hex strings),
so that checkpoints can carry them through the msgpack codec."""

from __future__ import annotations

from typing import Any

import numpy as np


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """The state of ``generator`` as plain data (see `generator_from_state`)."""
    state = generator.bit_generator.state
    inner = {k: hex(v) if isinstance(v, int) else v for k, v in state["state"].items()}
    return {**state, "state": inner}


def generator_from_state(data: dict[str, Any]) -> np.random.Generator:
    """A generator in the state that `generator_state` returned."""
    state = dict(data)
    state["state"] = {k: int(v, 16) if isinstance(v, str) else v for k, v in state["state"].items()}
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)
