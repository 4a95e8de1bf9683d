"""Metrics as JSON: what ``metrics.jsonl``, ``trials.json`` and task results hold."""

from __future__ import annotations

import math
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN as None, dicts walked."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
