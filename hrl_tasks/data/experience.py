"""Experience as Parquet files: what rollout workers record and offline learners read.

One row per env step, whole episodes per file (an episode never spans two files),
the columns of a `SampleBatch`:

| column | type | what |
|---|---|---|
| ``obs``, ``next_obs`` | the observation's dtype, fixed-size lists for shaped ones | before and after the step |
| ``actions`` | int64 or float32 (fixed-size list for vectors) | the action the env took, before clipping |
| ``rewards`` | float32 | the env's reward (never normalized) |
| ``terminateds``, ``truncateds`` | bool | how the step ended; a recording stopped mid-episode marks its last row truncated |
| ``eps_id`` | int64 | the episode, unique in the recording |
| ``t`` | int32 | the step's index in its episode |
| ``returns_to_go`` | float32 | the sum of this step's and later rewards of the episode (undiscounted) |
| ``logp`` | float32, optional | the behaviour policy's log-probability of the action |
| ``policy_id``, ``agent_id`` | string, optional | multi-agent recordings |

A multi-agent recording holds each agent's own trajectory (its observations, its
actions, the rewards until it next acted; ``t`` counts its own steps) under the
episode's ``eps_id``, with ``agent_id`` and ``policy_id``. Each file holds the rows of
one policy, whose id is in its name (``worker-1-<policy>-...parquet``) and metadata:
a glob such as ``DIR/*-learner-*.parquet`` reads one policy's rows.

A shaped column (an image, a vector) is a fixed-size list of its values in C
order; its field's metadata holds ``shape`` and ``dtype`` (JSON), so a uint8 image
stays uint8 and comes back in its shape. The file's metadata holds
``hrl_tasks.experience``: the schema version and what recorded it. Files written
by other code load too when their columns have these names and types (the shape of
a list column without metadata is its length); metadata that is not what the writer
writes (not JSON, a shape that is not a list of sizes, a dtype that is not a number's)
is refused with an `ExperienceError` naming the file and the field.

``pyarrow`` and ``fsspec`` are imported when a file is written or read (the
``offline`` extra): any fsspec URL names a directory (``s3://bucket/run``, a local
path).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hrl_tasks.errors import ConfigError

SCHEMA_VERSION = 1
METADATA_KEY = b"hrl_tasks.experience"
REQUIRED = ("obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t")
"""Columns every experience file has."""
OPTIONAL = ("next_obs", "returns_to_go", "logp", "policy_id", "agent_id")
KINDS = {
    "rewards": "f",
    "terminateds": "b",
    "truncateds": "b",
    "eps_id": "iu",
    "t": "iu",
    "returns_to_go": "f",
    "logp": "f",
    "policy_id": "OSU",
    "agent_id": "OSU",
}
"""The numpy kinds a column may have (obs, next_obs and actions may have any number)."""
KIND_NAMES = {"f": "a float", "b": "a bool", "iu": "an integer", "OSU": "a string"}
PART_ROWS = 100_000
PART_BYTES = 64 * 2**20


class ExperienceError(ConfigError):
    """An experience file that cannot be read as experience: names the file and column."""


# --- episodes into rows ----------------------------------------------------------------


def returns_to_go(rewards: np.ndarray) -> np.ndarray:
    """``out[t] = rewards[t] + rewards[t + 1] + ...`` over one episode. Pure."""
    return np.cumsum(np.asarray(rewards, np.float64)[::-1])[::-1].astype(np.float32)


@dataclass
class EpisodeRecorder:
    """Cuts the ``[T, N, ...]`` columns a rollout worker samples into whole episodes.

    `add` takes one sample call's columns and returns the rows of the episodes that
    ended in it (with ``returns_to_go``); `flush` returns the episodes still open,
    their last rows marked truncated, for the end of a recording.
    """

    columns: tuple[str, ...] = (*REQUIRED, "next_obs", "logp")
    open_rows: dict[int, list[dict[str, np.ndarray]]] = field(default_factory=dict)

    def add(self, sampled: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        kept = {k: np.asarray(v) for k, v in sampled.items() if k in self.columns}
        ended = np.asarray(sampled["terminateds"]) | np.asarray(sampled["truncateds"])
        finished = []
        for env in range(ended.shape[1]):
            start = 0
            for stop in [*(np.flatnonzero(ended[:, env]) + 1), ended.shape[0]]:
                if stop <= start:
                    continue
                piece = {k: np.array(v[start:stop, env]) for k, v in kept.items()}
                self.open_rows.setdefault(env, []).append(piece)
                if ended[stop - 1, env]:
                    finished.append(self._close(env))
                start = stop
        return concat_rows(finished)

    def flush(self) -> dict[str, np.ndarray] | None:
        """The open episodes, their last rows marked truncated (the recording cut them)."""
        episodes = [self._close(env, cut=True) for env in list(self.open_rows)]
        return concat_rows(episodes)

    def _close(self, env: int, cut: bool = False) -> dict[str, np.ndarray]:
        pieces = self.open_rows.pop(env)
        episode = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
        if cut and not (episode["terminateds"][-1] or episode["truncateds"][-1]):
            episode["truncateds"] = episode["truncateds"].copy()
            episode["truncateds"][-1] = True
        episode["returns_to_go"] = returns_to_go(episode["rewards"])
        return episode


def concat_rows(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray] | None:
    """The rows of ``parts`` (the same columns each) one after the other; None if none."""
    parts = [p for p in parts if p and len(next(iter(p.values())))]
    if not parts:
        return None
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# --- rows into Parquet tables, and back -------------------------------------------------


def to_table(columns: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None):
    """An Arrow table of the rows, shaped columns as fixed-size lists with their shape
    and dtype in the field's metadata, ``metadata`` (JSON) in the schema's."""
    import pyarrow as pa

    arrays, fields = [], []
    for name, values in columns.items():
        values = np.asarray(values)
        shape = values.shape[1:]
        if values.dtype.kind in "OSU":
            array = pa.array(values.astype(str).tolist(), pa.string())
        elif shape:
            flat = pa.array(np.ascontiguousarray(values).reshape(-1))
            array = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)))
        else:
            array = pa.array(values)
        meta = {b"shape": json.dumps(list(shape)).encode(), b"dtype": values.dtype.str.encode()}
        arrays.append(array)
        fields.append(pa.field(name, array.type, metadata=meta))
    info = {"schema_version": SCHEMA_VERSION, **(metadata or {})}
    schema = pa.schema(fields, metadata={METADATA_KEY: json.dumps(info).encode()})
    return pa.Table.from_arrays(arrays, schema=schema)


def from_table(table, source: str) -> dict[str, np.ndarray]:
    """The rows of an experience table as numpy columns in their recorded shapes.

    Raises:
        ExperienceError: naming ``source`` and the column, for a required column
            that is missing or a column of the wrong type.
    """
    names = set(table.column_names)
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise ExperienceError(
            f"{source}: no column {missing[0]!r}; experience files have the columns "
            f"{', '.join(REQUIRED)} (and optionally {', '.join(OPTIONAL)})"
        )
    columns = {}
    for name in table.column_names:
        columns[name] = column_values(table, name, source)
        kinds = KINDS.get(name)
        if kinds is not None and columns[name].dtype.kind not in kinds:
            raise ExperienceError(
                f"{source}: column {name!r} has dtype {columns[name].dtype}, expected "
                f"{KIND_NAMES[kinds]}"
            )
    return columns


def column_values(table, name: str, source: str) -> np.ndarray:
    """One column as numpy, reshaped from a list column to its recorded shape."""
    import pyarrow as pa

    field_ = table.schema.field(name)
    meta = field_.metadata or {}
    chunked = table.column(name)
    kind = field_.type
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        array = chunked.combine_chunks()
        if array.null_count:
            raise ExperienceError(f"{source}: column {name!r} has missing values")
        flat = array.flatten().to_numpy(zero_copy_only=False)
        rows = len(array)
        if b"shape" in meta:
            shape = recorded_shape(meta[b"shape"], name, source)
        else:  # written by other code: a row's length is its shape
            if rows and len(flat) % rows:
                raise ExperienceError(f"{source}: column {name!r} has rows of different lengths")
            shape = (len(flat) // rows,) if rows else (0,)
        if int(np.prod(shape)) * rows != len(flat):
            raise ExperienceError(
                f"{source}: column {name!r} has {len(flat)} values for {rows} rows of shape {shape}"
            )
        values = flat.reshape(rows, *shape)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        values = np.asarray(chunked.to_pylist(), dtype=object)
    else:
        if chunked.null_count:
            raise ExperienceError(f"{source}: column {name!r} has missing values")
        values = chunked.to_numpy()
    if b"dtype" in meta and values.dtype.kind not in "OSU":
        values = values.astype(recorded_dtype(meta[b"dtype"], name, source), copy=False)
    return values


def damaged(source: str, where: str, raw: bytes, expected: str) -> ExperienceError:
    """The error for metadata that is not what the writer writes: the file, the field
    and what it holds. Pure."""
    shown = raw if len(raw) <= 60 else raw[:60] + b"..."
    return ExperienceError(f"{source}: damaged metadata: {where} is {shown!r}, expected {expected}")


def recorded_shape(raw: bytes, name: str, source: str) -> tuple[int, ...]:
    """A column's ``shape`` metadata (a JSON list of sizes) as a tuple. Pure.

    Raises:
        ExperienceError: naming ``source`` and the column, if it is not one.
    """
    try:
        shape = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        shape = None
    sizes = isinstance(shape, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    )
    if not sizes:
        where = f"column {name!r} field 'shape'"
        raise damaged(source, where, raw, "a JSON list of sizes such as [84, 84]")
    return tuple(shape)


def recorded_dtype(raw: bytes, name: str, source: str) -> np.dtype:
    """A column's ``dtype`` metadata (numpy's ``dtype.str``, e.g. ``|u1``), which must
    be a number's or a bool's. Pure.

    Raises:
        ExperienceError: naming ``source`` and the column, if it is not one.
    """
    try:
        dtype = np.dtype(raw.decode())
    except (UnicodeDecodeError, TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biufc":
        where = f"column {name!r} field 'dtype'"
        raise damaged(source, where, raw, "a numeric numpy dtype such as '|u1' or '<f4'")
    return dtype


def recorded_info(raw: bytes | None, source: str) -> dict[str, Any]:
    """The file's ``hrl_tasks.experience`` metadata (a JSON object), {} if absent. Pure.

    Raises:
        ExperienceError: naming ``source`` and the field, if it is not a JSON object.
    """
    if not raw:
        return {}
    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        info = None
    if not isinstance(info, dict):
        where = f"schema field {METADATA_KEY.decode()!r}"
        raise damaged(source, where, raw, "a JSON object")
    return info


def table_metadata(table, source: str = "table") -> dict[str, Any]:
    """What the file says of itself (``schema_version``, the env...), or {} for files
    written by other code.

    Raises:
        ExperienceError: naming ``source``, if that metadata is damaged.
    """
    return recorded_info((table.schema.metadata or {}).get(METADATA_KEY), source)


# --- writing parts ---------------------------------------------------------------------


class PartWriter:
    """Writes rows to Parquet files of at least ``part_rows`` rows or ``part_bytes``
    bytes under a directory URL, each under a hidden name until complete.

    Args:
        url: A directory: a local path or any fsspec URL (``s3://bucket/prefix``).
        prefix: The start of each file's name (e.g. the worker's).
        metadata: JSON kept in each file's metadata (the env, the spaces).
    """

    def __init__(
        self,
        url: str,
        prefix: str,
        metadata: Mapping[str, Any] | None = None,
        part_rows: int = PART_ROWS,
        part_bytes: int = PART_BYTES,
    ):
        import fsspec

        self.fs, self.root = fsspec.core.url_to_fs(os.fspath(url))
        self.fs.makedirs(self.root, exist_ok=True)
        self.prefix, self.metadata = prefix, dict(metadata or {})
        self.part_rows, self.part_bytes = part_rows, part_bytes
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = self.pending_bytes = 0
        self.written: list[str] = []
        self.rows_written = 0

    def add(self, rows: Mapping[str, np.ndarray] | None) -> None:
        """Rows to write (whole episodes); a part is written once it is large enough."""
        if not rows:
            return
        self.pending.append(dict(rows))
        self.pending_rows += len(next(iter(rows.values())))
        self.pending_bytes += sum(np.asarray(v).nbytes for v in rows.values())
        if self.pending_rows >= self.part_rows or self.pending_bytes >= self.part_bytes:
            self.flush()

    def flush(self) -> str | None:
        """Writes what is pending as one part, whatever its size; returns its path."""
        rows = concat_rows(self.pending)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0
        if rows is None:
            return None
        import pyarrow.parquet as pq

        name = f"{self.prefix}-{len(self.written):05d}-{uuid.uuid4().hex[:8]}.parquet"
        hidden, final = f"{self.root}/.{name}", f"{self.root}/{name}"
        with self.fs.open(hidden, "wb") as f:
            pq.write_table(to_table(rows, self.metadata), f)
        self.fs.mv(hidden, final)
        self.written.append(final)
        self.rows_written += len(rows["rewards"])
        return final


# --- reading ---------------------------------------------------------------------------


def experience_files(pattern: str | os.PathLike) -> list[str]:
    """The Parquet files of a recording: a directory (its ``*.parquet``), a glob, or one
    file; any fsspec URL, sorted by name, with the protocol kept.

    Raises:
        ExperienceError: if nothing matches.
    """
    import fsspec

    text = os.fspath(pattern)
    fs, root = fsspec.core.url_to_fs(text)
    if fs.isdir(root):
        found = fs.glob(f"{root.rstrip('/')}/*.parquet")
    else:
        found = fs.glob(root) if any(c in root for c in "*?[") else [root] * fs.exists(root)
    if not found:
        raise ExperienceError(
            f"no experience files at {text!r} (a directory of *.parquet files, a glob, or one file)"
        )
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    keep = "" if protocol in ("file", "local") else f"{protocol}://"
    return [f"{keep}{path}" for path in sorted(found)]


def read_file(path: str, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """One experience file's rows (only ``columns`` if given), checked.

    Raises:
        ExperienceError: naming the file, for a file that is not Parquet, a missing
            required column, a column of the wrong type or damaged metadata.
    """
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with fsspec.open(path, "rb") as f:
            table = pq.read_table(f)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ExperienceError(f"{path}: not a readable Parquet file ({exc})") from None
    rows = from_table(table, path)
    if columns is not None:
        wanted = set(columns) | set(REQUIRED) | {"agent_id"}  # trajectories stay apart
        rows = {k: v for k, v in rows.items() if k in wanted}
    return rows


def recorded_env(pattern: str | os.PathLike) -> str | None:
    """The env id the first file of a recording names in its metadata (None if it names
    none, as files written by other code may not).

    Raises:
        ExperienceError: naming the file, if its metadata is damaged.
    """
    import fsspec
    import pyarrow.parquet as pq

    first = experience_files(pattern)[0]
    with fsspec.open(first, "rb") as f:
        raw = (pq.read_schema(f).metadata or {}).get(METADATA_KEY)
    env = recorded_info(raw, first).get("env")
    return env if isinstance(env, str) else None


def read_experience(pattern: str | os.PathLike):
    """A recording as a ``dask.dataframe`` (one partition per file), to explore with
    Dask as any Parquet data; shaped columns are lists there."""
    import dask.dataframe as dd

    return dd.read_parquet(experience_files(pattern))


def trajectory_order(rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """The order that puts ``rows`` in whole trajectories, steps in time order: by
    episode, then (in a multi-agent recording) agent, then step. Pure."""
    keys = [rows["t"]]
    if "agent_id" in rows:
        keys.append(np.unique(np.asarray(rows["agent_id"]).astype(str), return_inverse=True)[1])
    return np.lexsort((*keys, rows["eps_id"]))


def trajectory_starts(rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """Where each trajectory of ``rows`` (in `trajectory_order`) starts. Pure."""
    ids = np.asarray(rows["eps_id"])
    new = np.r_[True, ids[1:] != ids[:-1]]
    if "agent_id" in rows:
        agents = np.asarray(rows["agent_id"]).astype(str)
        new |= np.r_[True, agents[1:] != agents[:-1]]
    return np.flatnonzero(new)


def file_safe(name: Any) -> str:
    """``name`` as a part of a file name: letters, digits, ``_``, ``.`` and ``-``. Pure."""
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in str(name)) or "_"


def trajectory_rows(
    columns: Mapping[str, np.ndarray], eps_id: int, agent_id: Any, policy_id: Any
) -> dict[str, np.ndarray]:
    """One agent's whole trajectory of a multi-agent episode as experience rows: its
    columns (``[T, ...]``; ``logp`` if the policy has it), the episode id, its own step
    index, its returns-to-go and its agent and policy ids. Pure."""
    rewards = np.asarray(columns["rewards"], np.float32)
    rows = {
        k: np.array(columns[k])
        for k in (*REQUIRED, "next_obs", "logp")
        if k in columns and k not in ("eps_id", "t")
    }  # copies: the batch goes on
    rows["rewards"] = rewards
    rows["eps_id"] = np.full(len(rewards), eps_id, np.int64)
    rows["t"] = np.arange(len(rewards), dtype=np.int32)
    rows["returns_to_go"] = returns_to_go(rewards)
    rows["agent_id"] = np.full(len(rewards), str(agent_id), object)
    rows["policy_id"] = np.full(len(rewards), str(policy_id), object)
    return rows


class PolicyRecordings:
    """What one multi-agent rollout worker records: whole trajectories, one
    `PartWriter` per policy (a policy's rows share their shapes; policies' may not).

    Args:
        url: The recording's directory.
        prefix: The start of each file's name; the policy id follows it.
        metadata: JSON kept in every file (the env...); ``policy_id`` and the
            policy's spaces are added per policy.
        spaces: policy id -> (observation space, action space), for the metadata.
    """

    def __init__(self, url: str, prefix: str, metadata: Mapping[str, Any], spaces: Mapping):
        self.url, self.prefix, self.metadata, self.spaces = url, prefix, dict(metadata), spaces
        self.writers: dict[Any, PartWriter] = {}
        self.closed = False

    def add(self, policy_id: Any, rows: Mapping[str, np.ndarray]) -> None:
        """One trajectory's rows (`trajectory_rows`) of ``policy_id``."""
        writer = self.writers.get(policy_id)
        if writer is None:
            observation_space, action_space = self.spaces[policy_id]
            metadata = {
                **self.metadata,
                "policy_id": str(policy_id),
                "observation_space": repr(observation_space),
                "action_space": repr(action_space),
            }
            prefix = f"{self.prefix}-{file_safe(policy_id)}"
            writer = self.writers[policy_id] = PartWriter(self.url, prefix, metadata)
        writer.add(rows)

    def close(self) -> list[str]:
        """Writes what is still held (idempotent); returns the files written."""
        if not self.closed:
            self.closed = True
            for writer in self.writers.values():
                writer.flush()
        return [path for writer in self.writers.values() for path in writer.written]


class ExperienceRecording:
    """What one rollout worker records: its sampled steps cut into whole episodes and
    written in parts by ``writer``; `close` writes the open episodes and the rest."""

    def __init__(self, writer: PartWriter):
        self.episodes = EpisodeRecorder()
        self.writer = writer
        self.closed = False

    def add(self, sampled: Mapping[str, np.ndarray]) -> None:
        """One sample call's ``[T, N, ...]`` columns, as the env returned them."""
        self.writer.add(self.episodes.add(sampled))

    def close(self) -> list[str]:
        """Writes everything still held (idempotent); returns the files written."""
        if not self.closed:
            self.closed = True
            self.writer.add(self.episodes.flush())
            self.writer.flush()
        return list(self.writer.written)
