"""Experience data: batches, their msgpack codec, and replay buffers."""

from hrl_tasks.data.codec import DecodeError, decode, encode, register_dask_serialization
from hrl_tasks.data.replay import PrioritizedReplayBuffer, ReplayBuffer, SumTree
from hrl_tasks.data.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

__all__ = [
    "DEFAULT_POLICY_ID",
    "DecodeError",
    "MultiAgentBatch",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "SampleBatch",
    "SumTree",
    "decode",
    "encode",
    "register_dask_serialization",
]
