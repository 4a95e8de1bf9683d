import enum
import subprocess
import sys

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.data import MultiAgentBatch, SampleBatch, codec
from hrl_tasks.data.codec import DecodeError, decode, encode
from hrl_tasks.data.sample_batch import DEFAULT_POLICY_ID

DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.byte_string_dtypes(max_len=4),
    hnp.unicode_string_dtypes(max_len=4),
)
ARRAYS = hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()  # bit-exact, NaN included


@settings(max_examples=150, deadline=None)
@given(ARRAYS)
def test_array_round_trip_preserves_dtype_shape_and_bits(array):
    assert_same_array(decode(encode(array)), array)


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=6)))
def test_non_contiguous_arrays_round_trip(array):
    for view in (array[::2], array.T, array[..., ::-1]):
        assert_same_array(decode(encode(view)), view)


@settings(max_examples=50, deadline=None)
@given(ARRAYS)
def test_truncated_bytes_raise_decode_error(array):
    data = encode({"x": array, "t": (1, 2.0)})
    for cut in range(0, len(data), max(1, len(data) // 40)):
        with pytest.raises(DecodeError):
            decode(data[:cut])


@pytest.mark.parametrize(
    "foreign",
    [
        b"",
        b"hello world",
        b"\x93\x01\x02\x03",
        bytes(range(256)),
        b"\xd6\x7fhrl2\x01",
        b"\xd6\x7fhrl1\x01\x02",
    ],
)
def test_foreign_bytes_raise_decode_error(foreign):
    with pytest.raises(DecodeError):
        decode(foreign)


def test_corrupt_ext_payload_raises_decode_error():
    data = bytearray(encode(np.arange(4, dtype=np.int32)))
    # Marker (6 bytes) then ext8 header: 0xc7, length, type code; next the u32 header length.
    data[6 + 3] = 0xFF  # absurd header length
    with pytest.raises(DecodeError):
        decode(bytes(data))
    with pytest.raises(DecodeError, match="dtype"):
        decode(encode(np.zeros(2)).replace(b"<f8", b"|O8"))
    with pytest.raises(DecodeError, match="unknown dtype"):
        decode(encode(np.zeros(2)).replace(b"<f8", b"<Z8"))


def test_decoded_arrays_are_read_only_views():
    got = decode(encode(np.arange(10, dtype=np.float32)))
    assert not got.flags.writeable
    assert got.ctypes.data % 16 == 0  # aligned


def test_numpy_scalars_and_nested_containers():
    obj = {
        "f64": np.float64(1.5),
        "i8": np.int8(-3),
        "b": np.bool_(True),
        "u16": np.uint16(7),
        "py": [1, 2.5, "s", b"raw", None, True],
        "tuple": (1, (2, 3), [4]),
        (0, "key"): {"nested": np.zeros((2, 0))},
        3: "int key",
    }
    got = decode(encode(obj))
    for key in ("f64", "i8", "b", "u16"):
        assert type(got[key]) is type(obj[key]) and got[key] == obj[key]
    assert got["py"] == obj["py"]
    assert got["tuple"] == (1, (2, 3), [4]) and isinstance(got["tuple"][1], tuple)
    assert got[(0, "key")]["nested"].shape == (2, 0)
    assert got[3] == "int key"


def test_builtin_subclasses_encode_as_their_base():
    class Color(enum.IntEnum):
        RED = 1

    got = decode(encode([Color.RED]))
    assert got == [1] and type(got[0]) is int


def test_object_arrays_and_unknown_types_raise_type_error():
    with pytest.raises(TypeError, match="dtype object"):
        encode(np.array([{}, 1], dtype=object))
    infos = SampleBatch({"infos": np.array([{}, {}], dtype=object)})
    with pytest.raises(TypeError, match="column infos"):
        encode(infos)
    with pytest.raises(TypeError, match="cannot encode"):
        encode(object())
    structured = np.zeros(2, dtype=[("a", "i4"), ("b", "f4")])
    with pytest.raises(TypeError, match="dtype"):
        encode(structured)


def test_sample_batch_round_trip():
    batch = SampleBatch(
        {
            SampleBatch.OBS: np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32),
            SampleBatch.ACTIONS: np.arange(5),
            SampleBatch.TERMINATEDS: np.array([0, 0, 1, 0, 0], bool),
        }
    )
    got = decode(encode(batch))
    assert type(got) is SampleBatch and got.columns == batch.columns
    for name in batch:
        assert_same_array(got[name], batch[name])


def test_multi_agent_batch_round_trip():
    a = SampleBatch({"obs": np.ones((3, 2)), "rewards": np.arange(3.0)})
    b = SampleBatch({"obs": np.zeros((1, 4), np.int16)})
    ma = MultiAgentBatch({"pol_a": a, 7: b}, env_steps=3)
    got = decode(encode({"batch": ma}))["batch"]
    assert type(got) is MultiAgentBatch and got.env_steps() == 3
    assert list(got) == ["pol_a", 7]
    assert_same_array(got["pol_a"]["rewards"], a["rewards"])
    assert_same_array(got[7]["obs"], b["obs"])


def test_dask_serialization_uses_codec_not_pickle():
    from distributed.protocol import deserialize, serialize

    codec.register_dask_serialization()
    codec.register_dask_serialization()  # idempotent
    batch = SampleBatch({"obs": np.arange(6.0).reshape(3, 2), "eps_id": np.array([1, 1, 2])})
    header, frames = serialize(batch, serializers=("dask", "pickle"))
    assert header["serializer"] == "dask"
    assert len(frames) == 2  # a frame per column
    got = deserialize(header, frames)
    assert type(got) is SampleBatch
    assert_same_array(got["obs"], batch["obs"])
    assert_same_array(got["eps_id"], batch["eps_id"])

    ma = SampleBatch.concat_samples([batch, batch]).as_multi_agent()
    header, frames = serialize(ma, serializers=("dask", "pickle"))
    assert header["serializer"] == "dask"
    got = deserialize(header, frames)
    assert type(got) is MultiAgentBatch and got.env_steps() == 6
    assert_same_array(got[DEFAULT_POLICY_ID]["obs"], ma[DEFAULT_POLICY_ID]["obs"])


def test_columns_cross_dasks_protocol_without_copies():
    """Bytes of a column copied from the sender's batch to the receiver's: none by the
    codec. The frames go out from the batch's memory and the received columns are read
    in place from the receive buffer, writable, so a learner can use them as they are."""
    from distributed.protocol import dumps, loads, to_serialize

    frames_per_row = np.arange(3 * 4 * 84 * 84, dtype=np.uint8).reshape(3, 4, 84, 84)
    batch = SampleBatch({"obs": frames_per_row, "rewards": np.ones(3, np.float32)})
    sent = list(dumps({"batch": to_serialize(batch)}))
    in_place = [f for f in sent if np.shares_memory(np.frombuffer(f, np.uint8), batch["obs"])]
    assert len(in_place) == 1  # the obs frame is the batch's own memory
    received = [bytearray(f) for f in sent]  # what a socket read leaves (comm/tcp.py)
    got = loads(received)["batch"]
    obs = got["obs"]
    assert_same_array(obs, batch["obs"])
    assert obs.flags.writeable
    assert any(np.shares_memory(obs, np.frombuffer(f, np.uint8)) for f in received)


def test_policy_ids_of_any_encodable_type_cross_dask():
    from distributed.protocol import dumps, loads, to_serialize

    batch = SampleBatch({"obs": np.zeros((2, 3), np.float32)})
    ids = [np.int64(1), ("team", 2), "plain"]
    ma = MultiAgentBatch({pid: batch for pid in ids}, 2)
    got = loads(list(dumps({"b": to_serialize(ma)})))["b"]
    assert list(got) == [1, ("team", 2), "plain"]
    assert_same_array(got[("team", 2)]["obs"], batch["obs"])


def test_batches_sent_as_one_encoded_frame_still_decode():
    from distributed.protocol import deserialize, serialize

    batch = SampleBatch({"obs": np.arange(6.0).reshape(3, 2)})
    header, _ = serialize(batch, serializers=("dask",))
    old_form = {**header, "sub-header": {}}  # before, a batch was one encoded frame
    assert_same_array(deserialize(old_form, [encode(batch)])["obs"], batch["obs"])


def test_misshapen_frames_raise_decode_error():
    from distributed.protocol import deserialize, serialize

    batch = SampleBatch({"obs": np.zeros((4, 2), np.float32)})
    header, frames = serialize(batch, serializers=("dask",))
    with pytest.raises(DecodeError, match="frame of 24 bytes"):
        deserialize(header, [bytes(frames[0])[:24]])
    with pytest.raises(DecodeError, match="for 2 frames"):
        deserialize(header, [frames[0], frames[0]])


def test_import_registers_when_distributed_is_loaded():
    # A worker process has distributed loaded and imports hrl_tasks.data when it
    # unpickles the batch class from the "dask" header: that import must register.
    script = (
        "from distributed.protocol.serialize import dask_deserialize, dask_serialize\n"
        "from hrl_tasks.data.sample_batch import MultiAgentBatch, SampleBatch\n"
        "from hrl_tasks.data import codec\n"
        "assert dask_deserialize.dispatch(SampleBatch) is codec._dask_loads\n"
        "assert dask_serialize.dispatch(MultiAgentBatch) is codec._dask_dumps\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_batches_use_the_codec_in_dask_whichever_import_came_first():
    code = (
        "import sys, hrl_tasks.data; first = 'distributed' in sys.modules; "
        "import hrl_tasks.scheduler; "
        "from distributed.protocol.serialize import dask_deserialize; "
        "print(first, dask_deserialize.dispatch(hrl_tasks.data.SampleBatch).__name__)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert found.stdout.split() == ["False", "_dask_loads"], found.stderr
