"""Convert a search an earlier version wrote (``search.pkl``) to a state file, once::

    python -m hrl_tasks.tuning.convert DIR

An earlier version saved a search's sampler and trial scheduler as a pickle, and
reading a pickle runs whatever code it names: a resume refuses it. Run this only on
a directory you trust (your own runs wrote it). It unpickles ``DIR/search.pkl`` this
once, reads ``DIR/trials.json``, and writes ``DIR/search.json`` (and trials.json
again, with each checkpoint named relative to DIR); ``search.pkl`` is left as it was
and never read again. Then resume as before (``hrl-tasks tune ... --resume``).

A random or grid search, or one with any trial scheduler, continues as the earlier
version would have. An Optuna search keeps its trials, but its next proposals come
from a generator seeded with the number of trials asked, not from the earlier
sampler's state.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from hrl_tasks.search.samplers import GridSampler, OptunaSampler, RandomSampler, grid_points
from hrl_tasks.search.space import SearchError
from hrl_tasks.search.state import to_json
from hrl_tasks.tuning.runner import record_text
from hrl_tasks.tuning.state_file import (
    EARLIER_FILE,
    STATE_FILE,
    TRIALS_FILE,
    decisions_state,
    write_search,
)


def convert(out: Path) -> Path:
    """Write the state file of the earlier search in ``out`` (see the module docstring).

    Returns:
        The state file written.

    Raises:
        SearchError: if ``out`` holds a state file already, or no earlier search.
    """
    out = Path(out)
    if (out / STATE_FILE).exists():
        raise SearchError(f"{out} holds {STATE_FILE} already: it needs no conversion")
    if not (out / EARLIER_FILE).exists():
        raise SearchError(f"{out} holds no {EARLIER_FILE}: there is nothing to convert")
    # Explicitly trusted: the user ran this command on a directory of their own.
    earlier = pickle.loads((out / EARLIER_FILE).read_bytes())
    records = [relative_checkpoint(r) for r in json.loads((out / TRIALS_FILE).read_text())]
    decisions = decisions_state(
        earlier_sampler_state(earlier["sampler"]),
        earlier["scheduler"].to_state(),
        earlier["stop"],
        earlier.get("time_attr", "iteration"),
        earlier["exhausted"],
    )
    write_search(out, decisions, [record_text(r) for r in records])
    return out / STATE_FILE


def relative_checkpoint(record: Mapping[str, Any]) -> dict:
    """A trial's record with its checkpoint named where the search wrote it, relative to
    its directory: ``trials/<id>/checkpoints/<file>`` (an earlier version named it
    relative to the working directory, or absolutely). Pure."""
    if record["checkpoint"] is None:
        return dict(record)
    name = PurePath(record["checkpoint"]).name
    return {**record, "checkpoint": f"trials/{record['trial_id']}/checkpoints/{name}"}


def earlier_sampler_state(sampler: Any) -> dict:
    """The state of a sampler unpickled from an earlier version, whose attributes were
    not the ones this version's samplers keep.

    Raises:
        SearchError: for a sampler of another class.
    """
    # Each private read below is of the earlier version's attributes, as it pickled them.
    if type(sampler) in (RandomSampler, GridSampler):
        space, rng = sampler._space, sampler._rng  # noqa: SLF001
        # Its points were an iterator: what is left of it was not proposed yet.
        left = sum(1 for _ in sampler._points)  # noqa: SLF001
        now = type(sampler)(space, sampler.num_trials // len(grid_points(space)), seed=rng)
        now.proposed = sampler.num_trials - left
        return now.to_state()
    if type(sampler) is OptunaSampler:
        # Its Optuna study, and its trials asked but not yet told, by trial id.
        study, pending = sampler._study, sampler._pending  # noqa: SLF001
        trials = study.get_trials(deepcopy=False)
        mode = "max" if study.direction.name == "MAXIMIZE" else "min"
        # Its space; the generator of its next proposals is seeded with the trials asked.
        space = sampler._space  # noqa: SLF001
        now = OptunaSampler(space, sampler.num_trials, sampler.metric, mode, len(trials))
        return {
            **now.to_state(),
            "trials": [
                {"params": to_json(t.params), "state": t.state.name, "value": t.value}
                for t in trials
            ],
            "pending": [[to_json(trial_id), t.number] for trial_id, t in pending.items()],
        }
    raise SearchError(f"an earlier sampler of class {type(sampler).__name__} is not converted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hrl_tasks.tuning.convert",
        description="Convert a search an earlier version wrote (search.pkl, a pickle) to "
        "search.json. Reading a pickle runs whatever code it names: run this only on a "
        "directory you trust.",
    )
    parser.add_argument("dir", type=Path, help="the search's output directory")
    args = parser.parse_args(argv)
    try:
        path = convert(args.dir)
    except (SearchError, OSError) as exc:
        print(f"convert: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}; resume the search with --resume (or tune(resume=True))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
