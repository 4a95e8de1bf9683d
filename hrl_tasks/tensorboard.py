"""TensorBoard event files of a run's metrics, written when ``tensorboard`` is installed.

``hrl-tasks train`` writes one run into ``OUT/tensorboard/``; ``hrl-tasks tune`` one
run per trial into ``OUT/tensorboard/<trial id>/``, so that ``tensorboard --logdir
OUT/tensorboard`` compares the trials. Each numeric metric is a scalar (nested ones
as ``info/loss_policy``), its step the env steps sampled, as Stable-Baselines3 and
RLlib users know them.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import os
import socket
import struct
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

FILE_VERSION = "brain.Event:2"
"""The first event of every file, as TensorFlow's and torch's writers put it."""


def metrics_writer(logdir: str | Path) -> MetricsWriter | None:
    """A writer into ``logdir``, or None when tensorboard is not installed."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    return MetricsWriter(logdir)


class MetricsWriter:
    """Writes each reported result's numbers as scalars of one TensorBoard run.

    The events are encoded here (`event_record`), not by ``torch.utils.tensorboard``,
    whose import took a seventh of the driver's CPU in a one-iteration run; the file
    is the one TensorBoard reads (tests read it with TensorBoard's own reader)."""

    def __init__(self, logdir: str | Path):
        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self.file = open(logdir / name, "ab")  # noqa: SIM115 - open for the run, closed by close()
        self.file.write(event_record(time.time(), 0, file_version=FILE_VERSION))

    def write(self, result: Mapping) -> None:
        """One point per numeric metric, at step ``env_steps_sampled``."""
        step = int(result.get("env_steps_sampled", result.get("iteration", 0)))
        self.file.write(event_record(time.time(), step, scalars=scalars(result)))
        self.file.flush()

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def event_record(
    wall_time: float,
    step: int,
    *,
    file_version: str | None = None,
    scalars: Iterable[tuple[str, float]] = (),
) -> bytes:
    """One ``Event`` message (TensorBoard's ``event.proto``: ``wall_time`` = 1,
    ``step`` = 2, ``file_version`` = 3, ``summary`` = 5, a ``Summary`` of ``Value``s
    with ``tag`` = 1 and ``simple_value`` = 2) framed as a TFRecord: the length, its
    masked CRC-32C, the message, its masked CRC-32C. Pure."""
    message = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + varint(step)
    if file_version is not None:
        message += b"\x1a" + delimited(file_version.encode())
    values = b"".join(
        b"\x0a" + delimited(b"\x0a" + delimited(tag.encode()) + b"\x15" + struct.pack("<f", value))
        for tag, value in scalars
    )
    if values:
        message += b"\x2a" + delimited(values)
    length = struct.pack("<Q", len(message))
    return (
        length
        + struct.pack("<I", masked_crc(length))
        + message
        + struct.pack("<I", masked_crc(message))
    )


def varint(value: int) -> bytes:
    """``value`` (an int64, two's complement when negative) as a protobuf varint. Pure."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def delimited(data: bytes) -> bytes:
    """A length-delimited protobuf field's body: the length as a varint, then ``data``."""
    return varint(len(data)) + data


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of ``data``. Pure."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (rotated right 15 bits, plus 0xA282EAD8). Pure."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def scalars(result: Mapping, prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(tag, value)`` for every finite number in ``result``, nested dicts as ``a/b``;
    the engine's own statistics are left out."""
    for key, value in result.items():
        tag = f"{prefix}{key}"
        if key == "engine":
            continue
        if isinstance(value, Mapping):
            yield from scalars(value, f"{tag}/")
        elif is_number(value) and math.isfinite(value):
            yield tag, float(value)


def is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
