"""A search's state file, ``search.json`` in its output directory: all that a resume reads.

It holds the search's decisions and its trials, as plain JSON (`hrl_tasks.search.state`
says how samplers and trial schedulers write theirs)::

    {
     "format": "hrl_tasks.search/1",
     "stop": {"iteration": 4},        # each trial's stop conditions
     "time_attr": "iteration",        # what the trial scheduler counts
     "exhausted": false,              # whether the sampler proposed its last config
     "sampler": {"kind": "random", "space": {...}, "num_samples": 4, "proposed": 2,
                 "rng": {...}},
     "scheduler": {"kind": "asha", "max_t": 100, ..., "recorded": [...]},
     "trials": [
    {"trial_id": "0000", "config": {...}, "status": "TERMINATED", ...,
     "checkpoint": "trials/0000/checkpoints/checkpoint-000004.hrl", ...},
    ...
     ]
    }

A trial's checkpoint is named relative to the output directory, so that a search
moved elsewhere resumes. Each save writes the state file, then ``trials.json`` (its
``trials`` alone, for users), each one atomically; after a crash between the two,
trials.json is one save behind the state file, never ahead of it, and the resume,
which reads only the state file, rewrites it before its first trial starts.

A search written by an earlier version holds ``search.pkl``, a pickle, instead. It is
refused (`check_resumable`), since reading a pickle runs whatever code it names; a
user who trusts the directory converts it once with ``python -m
hrl_tasks.tuning.convert DIR``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hrl_tasks.run_dir import write_atomically
from hrl_tasks.search.samplers import sampler_from_state
from hrl_tasks.search.schedulers import scheduler_from_state
from hrl_tasks.search.space import SearchError
from hrl_tasks.search.state import from_json, to_json

STATE_FILE = "search.json"
TRIALS_FILE = "trials.json"
EARLIER_FILE = "search.pkl"
"""What an earlier version saved a search's decisions in: a pickle, never read on resume."""
FORMAT = "hrl_tasks.search/1"


# --- the layout: pure ----------------------------------------------------------------


def decisions_state(
    sampler: Mapping[str, Any],
    scheduler: Mapping[str, Any],
    stop: Mapping[str, Any],
    time_attr: str,
    exhausted: bool,
) -> dict:
    """The decisions of a search as its state file holds them, from its sampler's and
    trial scheduler's ``to_state()``."""
    return {
        "format": FORMAT,
        "stop": to_json(dict(stop)),
        "time_attr": time_attr,
        "exhausted": bool(exhausted),
        "sampler": dict(sampler),
        "scheduler": dict(scheduler),
    }


def decisions_from_state(state: Mapping[str, Any]) -> dict:
    """What `Search` decides with, from a state file's decisions: its ``sampler``, trial
    ``scheduler``, ``stop`` conditions, ``time_attr`` and ``exhausted``.

    Raises:
        SearchError: for a sampler or scheduler that cannot be rebuilt from it.
    """
    return {
        "sampler": sampler_from_state(state["sampler"]),
        "scheduler": scheduler_from_state(state["scheduler"]),
        "stop": from_json(state["stop"]),
        "time_attr": state["time_attr"],
        "exhausted": bool(state["exhausted"]),
    }


def state_text(decisions: Mapping[str, Any], trial_lines: Sequence[bytes]) -> bytes:
    """The state file: ``decisions`` (`decisions_state`), then the trials, a line each.

    ``trial_lines`` are the trials' records as JSON text (an ended trial keeps its text,
    which is not encoded again at each save)."""
    head = json.dumps(dict(decisions), indent=1).encode()  # ends with "\n}"
    return head[:-2] + b',\n "trials": [\n' + b",\n".join(trial_lines) + b"\n ]\n}\n"


def trials_text(trial_lines: Sequence[bytes]) -> bytes:
    """trials.json: the trials' records, a line each."""
    return b"[\n" + b",\n".join(trial_lines) + b"\n]\n"


def earlier_format(out: Path) -> str:
    """The one line that refuses to resume the search an earlier version wrote in ``out``."""
    return (
        f"{out} holds a search written by an earlier version of hrl_tasks, whose decisions "
        f"are in {EARLIER_FILE}, a pickle; it is not read, since reading a pickle runs "
        f"whatever code it names. If you trust this directory (your own runs wrote it), "
        f"convert it once with: python -m hrl_tasks.tuning.convert {out}"
    )


# --- the directory -----------------------------------------------------------------------


def write_search(out: Path, decisions: Mapping[str, Any], trial_lines: Sequence[bytes]) -> None:
    """Write the state file, then trials.json, each atomically (`write_atomically`)."""
    write_atomically(out / STATE_FILE, state_text(decisions, trial_lines))
    write_atomically(out / TRIALS_FILE, trials_text(trial_lines))


def check_resumable(out: Path | None) -> None:
    """Raise unless ``out`` holds a search's state file.

    Raises:
        SearchError: naming what is missing; for a search an earlier version wrote, its
            pickle and the command that converts it.
    """
    if out is not None and (Path(out) / STATE_FILE).exists():
        return
    if out is not None and (Path(out) / EARLIER_FILE).exists():
        raise SearchError(earlier_format(Path(out)))
    raise SearchError(f"nothing to resume in {out}: it holds no {STATE_FILE}")


def read_state(out: Path) -> dict:
    """The state file in ``out``, as plain JSON values (only that file is read).

    Raises:
        SearchError: if there is none (`check_resumable`), or it is not one this
            version reads.
    """
    check_resumable(out)
    path = Path(out) / STATE_FILE
    try:
        state = json.loads(path.read_bytes())
    except ValueError as exc:
        raise SearchError(f"{path} is not a search's state file: {exc}") from None
    found = state.get("format") if isinstance(state, dict) else None
    if found != FORMAT:
        raise SearchError(f"{path} holds {found!r}, not a search's state ({FORMAT})")
    return state


def read_search(out: Path) -> tuple[dict, list[dict]]:
    """What the search saved in ``out`` decides with (`decisions_from_state`), and its
    trials' records, read from its state file alone.

    Raises:
        SearchError: if ``out`` holds no state file this version reads, or one whose
            decisions or trials are not whole.
    """
    state = read_state(out)
    try:
        return decisions_from_state(state), list(state["trials"])
    except (KeyError, TypeError) as exc:  # a file edited by hand, or cut short and mended
        message = f"the search in {Path(out) / STATE_FILE} is not whole: {exc!r}"
        raise SearchError(message) from None


def read_decisions(out: Path) -> dict:
    """What the search saved in ``out`` decides with (`read_search`)."""
    return read_search(out)[0]
