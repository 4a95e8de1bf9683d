import numpy as np
import pytest

from hrl_tasks.data import MultiAgentBatch, SampleBatch

SB = SampleBatch


def make_batch(n: int = 6, offset: int = 0) -> SampleBatch:
    rows = np.arange(offset, offset + n)
    return SampleBatch(
        {
            SB.OBS: np.stack([rows, -rows], axis=1).astype(np.float32),
            SB.ACTIONS: rows % 2,
            SB.REWARDS: rows * 0.5,
        }
    )


def test_construction_len_columns_and_access():
    batch = make_batch(6)
    assert len(batch) == 6
    assert batch.columns == (SB.OBS, SB.ACTIONS, SB.REWARDS)
    assert list(batch) == list(batch.columns)
    assert SB.OBS in batch and "missing" not in batch
    np.testing.assert_array_equal(batch[SB.REWARDS], np.arange(6) * 0.5)
    assert batch.env_steps() == batch.agent_steps() == 6
    assert len(SampleBatch()) == 0 and SampleBatch().columns == ()
    empty_rows = SampleBatch({SB.OBS: np.zeros((0, 3))})
    assert SampleBatch(empty_rows).columns == (SB.OBS,)  # a falsy batch still has columns


def test_length_mismatch_names_columns_and_lengths():
    with pytest.raises(ValueError, match=r"obs=3.*rewards=2"):
        SampleBatch({"obs": np.zeros((3, 2)), "rewards": np.zeros(2)})
    with pytest.raises(ValueError, match="0-d"):
        SampleBatch({"obs": np.float32(1.0)})
    with pytest.raises(TypeError, match="str"):
        SampleBatch({1: np.zeros(3)})


def test_setitem_checks_length():
    batch = make_batch(4)
    batch[SB.ADVANTAGES] = np.ones(4)
    assert SB.ADVANTAGES in batch
    with pytest.raises(ValueError, match="rewards=4.*values=3"):
        batch[SB.VALUES] = np.ones(3)
    assert SB.VALUES not in batch


def test_slice_returns_views():
    batch = make_batch(6)
    part = batch[2:5]
    assert isinstance(part, SampleBatch) and len(part) == 3
    np.testing.assert_array_equal(part[SB.ACTIONS], [0, 1, 0])
    assert np.shares_memory(part[SB.OBS], batch[SB.OBS])
    with pytest.raises(TypeError):
        batch[0]


def test_copy_is_deep_and_writable():
    batch = make_batch(3)
    batch[SB.OBS].flags.writeable = False
    copied = batch.copy()
    copied[SB.OBS][0, 0] = 99.0
    assert batch[SB.OBS][0, 0] == 0.0


def test_concat_samples():
    a, b = make_batch(2), make_batch(3, offset=2)
    out = SampleBatch.concat_samples([a, SampleBatch(), b])
    assert len(out) == 5
    np.testing.assert_array_equal(out[SB.REWARDS], np.arange(5) * 0.5)
    np.testing.assert_array_equal(out[SB.OBS], make_batch(5)[SB.OBS])
    assert len(SampleBatch.concat_samples([])) == 0


def test_concat_samples_rejects_mismatched_columns():
    a = make_batch(2)
    b = make_batch(2)
    del b[SB.REWARDS]
    b[SB.VALUES] = np.zeros(2)
    with pytest.raises(ValueError, match=r"missing \['rewards'\], extra \['values'\]"):
        SampleBatch.concat_samples([a, b])
    c = SampleBatch({SB.OBS: np.zeros((2, 3)), SB.ACTIONS: np.zeros(2), SB.REWARDS: np.zeros(2)})
    with pytest.raises(ValueError, match="'obs'"):
        SampleBatch.concat_samples([a, c])
    with pytest.raises(TypeError, match="MultiAgentBatch.concat_samples"):
        SampleBatch.concat_samples([a.as_multi_agent()])


def test_shuffle_is_a_permutation_of_rows_and_reproducible():
    batch = make_batch(50)
    shuffled = batch.shuffle(np.random.default_rng(0))
    assert sorted(shuffled[SB.REWARDS]) == sorted(batch[SB.REWARDS])
    assert not np.array_equal(shuffled[SB.REWARDS], batch[SB.REWARDS])
    # rows stay aligned across columns
    np.testing.assert_array_equal(shuffled[SB.OBS][:, 0] * 0.5, shuffled[SB.REWARDS])
    np.testing.assert_array_equal(batch.shuffle(3)[SB.REWARDS], batch.shuffle(3)[SB.REWARDS])


def test_minibatches_cover_every_row_once():
    batch = make_batch(10)
    mbs = list(batch.minibatches(4, rng=1))
    assert [len(mb) for mb in mbs] == [4, 4, 2]
    rows = np.concatenate([mb[SB.REWARDS] for mb in mbs])
    assert sorted(rows) == sorted(batch[SB.REWARDS])
    assert [len(mb) for mb in batch.minibatches(4, rng=1, drop_last=True)] == [4, 4]
    with pytest.raises(ValueError):
        next(batch.minibatches(0))


def test_split_by_episode_groups_interleaved_rows_in_order():
    eps = np.array([7, 7, 3, 7, 3, 9])
    batch = SampleBatch({SB.EPS_ID: eps, SB.T: np.array([0, 1, 0, 2, 1, 0])})
    episodes = batch.split_by_episode()
    assert [e[SB.EPS_ID].tolist() for e in episodes] == [[7, 7, 7], [3, 3], [9]]
    assert [e[SB.T].tolist() for e in episodes] == [[0, 1, 2], [0, 1], [0]]
    assert SampleBatch({SB.EPS_ID: np.zeros(0, int)}).split_by_episode() == []


def test_split_by_episode_needs_eps_id():
    with pytest.raises(KeyError, match="eps_id"):
        make_batch(3).split_by_episode()


def test_multi_agent_batch_counts_and_concat():
    ma1 = MultiAgentBatch({"p0": make_batch(3), "p1": make_batch(2)}, env_steps=3)
    ma2 = MultiAgentBatch({"p0": make_batch(4)}, env_steps=4)
    assert ma1.env_steps() == 3 and ma1.agent_steps() == 5 and len(ma1) == 2
    out = MultiAgentBatch.concat_samples([ma1, ma2])
    assert out.env_steps() == 7 and out.agent_steps() == 9
    assert len(out["p0"]) == 7 and len(out["p1"]) == 2
    assert set(out) == {"p0", "p1"}
    single = make_batch(2).as_multi_agent()
    assert list(single) == ["default_policy"] and single.env_steps() == 2


def test_multi_agent_batch_validates():
    with pytest.raises(TypeError, match="p0"):
        MultiAgentBatch({"p0": {"obs": np.zeros(2)}}, env_steps=2)
    with pytest.raises(ValueError):
        MultiAgentBatch({}, env_steps=-1)
