"""TensorBoard event files: the encoding against TensorBoard's own protobufs and reader."""

import math

import pytest

from hrl_tasks.tensorboard import MetricsWriter, crc32c, event_record, masked_crc, scalars, varint

event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2", reason="the test extra")


def test_crc32c_of_the_standard_check_inputs():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC catalogue's check value
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720, B.4
    assert crc32c(b"\xff" * 32) == 0x62A8AB43


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63)])
def test_varint_is_protobufs(value):
    encoded = event_pb2.Event(step=value).SerializeToString()
    assert encoded == b"\x10" + varint(value) if value else encoded == b""


def test_an_event_record_parses_as_tensorboards_event():
    record = event_record(1.5, 1024, scalars=[("a/b", 0.25), ("c", -3.0)])
    length = int.from_bytes(record[:8], "little")
    message = record[12 : 12 + length]
    assert len(record) == 16 + length
    assert int.from_bytes(record[8:12], "little") == masked_crc(record[:8])
    assert int.from_bytes(record[12 + length :], "little") == masked_crc(message)
    event = event_pb2.Event.FromString(message)
    assert (event.wall_time, event.step) == (1.5, 1024)
    assert [(v.tag, v.simple_value) for v in event.summary.value] == [("a/b", 0.25), ("c", -3.0)]
    version = event_pb2.Event.FromString(event_record(2.0, 0, file_version="brain.Event:2")[12:-4])
    assert version.file_version == "brain.Event:2"


def test_tensorboards_reader_reads_a_run(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    writer = MetricsWriter(tmp_path / "run")
    results = [
        {"env_steps_sampled": 100 * i, "episode_return_mean": 10.0 * i, "info": {"loss": 1 / i},
         "nan": math.nan, "flag": True, "engine": {"submitted": 3}}
        for i in (1, 2, 3)
    ]  # fmt: skip
    for result in results:
        writer.write(result)
    writer.close()
    events = accumulator.EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == [
        "env_steps_sampled",
        "episode_return_mean",
        "info/loss",
    ]
    got = [(e.step, e.value) for e in events.Scalars("info/loss")]
    assert got == [(100 * i, pytest.approx(1 / i)) for i in (1, 2, 3)]
    assert dict(scalars(results[0])) == {
        "env_steps_sampled": 100.0, "episode_return_mean": 10.0, "info/loss": 1.0
    }  # fmt: skip
