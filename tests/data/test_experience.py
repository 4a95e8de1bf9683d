"""Experience files: episodes cut from sampled columns, Parquet round trips, clear refusals."""

import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hrl_tasks.data.experience import (  # noqa: E402
    EpisodeRecorder,
    ExperienceError,
    PartWriter,
    experience_files,
    file_safe,
    from_table,
    read_file,
    recorded_env,
    returns_to_go,
    to_table,
    trajectory_order,
    trajectory_rows,
    trajectory_starts,
)
from hrl_tasks.policies.off_policy_estimation import split_episodes  # noqa: E402


def sampled(steps, envs, ends, start_t=None, seed=0):
    """``[T, N]`` columns as a rollout worker fills them, episodes ending at ``ends``
    (a set of (t, env)); ids and step counters follow the worker's rules."""
    rng = np.random.default_rng(seed)
    terminated = np.zeros((steps, envs), bool)
    for t, env in ends:
        terminated[t, env] = True
    eps_id = np.zeros((steps, envs), np.int64)
    step = np.zeros((steps, envs), np.int64)
    current, t_in = np.arange(envs) * 1000, np.zeros(envs, np.int64) if start_t is None else start_t
    for t in range(steps):
        eps_id[t], step[t] = current, t_in
        t_in = t_in + 1
        done = terminated[t]
        current = np.where(done, current + 1, current)
        t_in = np.where(done, 0, t_in)
    return {
        "obs": rng.integers(0, 255, size=(steps, envs, 3, 2), dtype=np.uint8),
        "next_obs": rng.integers(0, 255, size=(steps, envs, 3, 2), dtype=np.uint8),
        "actions": rng.integers(0, 4, size=(steps, envs)),
        "rewards": rng.normal(size=(steps, envs)).astype(np.float32),
        "terminateds": terminated,
        "truncateds": np.zeros((steps, envs), bool),
        "eps_id": eps_id,
        "t": step,
        "logp": rng.normal(size=(steps, envs)).astype(np.float32),
        "values": np.zeros((steps, envs), np.float32),  # not recorded
    }


def test_returns_to_go_sums_the_rest_of_the_episode():
    np.testing.assert_allclose(returns_to_go(np.array([1.0, 2.0, 3.0])), [6.0, 5.0, 3.0])


def test_episodes_come_out_whole_across_sample_calls_and_open_ones_at_flush():
    recorder = EpisodeRecorder()
    first = sampled(6, 2, ends={(2, 0), (4, 1)})
    second = sampled(6, 2, ends={(1, 0)}, seed=1)
    # the second call continues the first one's open episodes (ids and steps)
    second["eps_id"][:2, 0], second["t"][:2, 0] = first["eps_id"][5, 0], [3, 4]
    second["eps_id"][:, 1], second["t"][:, 1] = first["eps_id"][5, 1], np.arange(1, 7)
    out = recorder.add(first)
    assert sorted(set(out["eps_id"])) == [0, 1000]  # env 0's first, env 1's first
    assert "values" not in out
    out2 = recorder.add(second)
    assert set(out2["eps_id"]) == {1}  # env 0's second episode: 3 steps then 2 more
    np.testing.assert_array_equal(out2["t"], [0, 1, 2, 3, 4])
    rest = recorder.flush()
    assert recorder.flush() is None
    every = [out, out2, rest]
    rows = sum(len(part["rewards"]) for part in every)
    assert rows == 6 * 2 * 2  # every sampled step, once
    for part in every:  # each episode's rows in order, returns-to-go of its own rewards
        for eps in set(part["eps_id"]):
            mine = part["eps_id"] == eps
            np.testing.assert_array_equal(
                part["t"][mine], np.arange(mine.sum()) + part["t"][mine][0]
            )
            np.testing.assert_allclose(part["returns_to_go"][mine],
                                       np.cumsum(part["rewards"][mine][::-1])[::-1], rtol=1e-5)  # fmt: skip
            ended = part["terminateds"][mine] | part["truncateds"][mine]
            assert ended[-1] and not ended[:-1].any()  # flush marks the cut truncated
    assert rest["truncateds"].sum() == 2 and not rest["terminateds"].any()


def test_a_table_keeps_dtypes_and_shapes_and_reads_back():
    rows = {k: v.reshape(-1, *v.shape[2:]) for k, v in sampled(4, 2, ends=set()).items()}
    rows["actions_box"] = np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2)
    rows["policy_id"] = np.array(["a", "b"] * 4, dtype=object)
    table = to_table(rows, {"env": "Example-v0"})
    back = from_table(table, "memory")
    for name, values in rows.items():
        assert back[name].dtype == values.dtype or values.dtype == object, name
        assert back[name].shape == values.shape, name
        np.testing.assert_array_equal(back[name], values)
    assert back["obs"].dtype == np.uint8 and back["obs"].shape == (8, 3, 2)


def test_files_written_by_other_code_load_and_bad_ones_are_named(tmp_path):
    good = pa.table({
        "obs": pa.array([[0.1, 0.2], [0.3, 0.4]], pa.list_(pa.float32())),
        "actions": [0, 1], "rewards": pa.array([1.0, 0.5], pa.float32()),
        "terminateds": [False, True], "truncateds": [False, False],
        "eps_id": [7, 7], "t": [0, 1],
    })  # fmt: skip
    pq.write_table(good, tmp_path / "theirs.parquet")
    rows = read_file(str(tmp_path / "theirs.parquet"))
    assert rows["obs"].shape == (2, 2) and rows["obs"].dtype == np.float32
    pq.write_table(good.drop(["rewards"]), tmp_path / "no_rewards.parquet")
    with pytest.raises(ExperienceError, match="no_rewards.parquet: no column 'rewards'") as bad:
        read_file(str(tmp_path / "no_rewards.parquet"))
    assert "\n" not in str(bad.value)
    wrong = good.set_column(2, "rewards", pa.array(["one", "half"]))
    pq.write_table(wrong, tmp_path / "text.parquet")
    with pytest.raises(ExperienceError, match="text.parquet: column 'rewards' has dtype object, "
                                              "expected a float"):  # fmt: skip
        read_file(str(tmp_path / "text.parquet"))
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ExperienceError, match="junk.parquet: not a readable Parquet file"):
        read_file(str(tmp_path / "junk.parquet"))
    with pytest.raises(ExperienceError, match="no experience files at"):
        experience_files(str(tmp_path / "nothing-here"))


def test_parts_hold_whole_episodes_and_nothing_is_left_hidden(tmp_path):
    writer = PartWriter(str(tmp_path / "run"), "worker-1", {"env": "Example-v0"}, part_rows=10)
    recorder = EpisodeRecorder()
    for call in range(5):
        writer.add(recorder.add(sampled(8, 1, ends={(3, 0), (7, 0)}, seed=call)))
    writer.add(recorder.flush())
    writer.flush()
    files = experience_files(str(tmp_path / "run"))
    assert files == sorted(writer.written) and len(files) >= 3
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    total = 0
    for path in files:
        rows = read_file(path)
        total += len(rows["rewards"])
        ended = rows["terminateds"] | rows["truncateds"]
        assert ended[-1]  # a file ends with an episode's end
        meta = json.loads(pq.read_schema(path).metadata[b"hrl_tasks.experience"])
        assert meta == {"schema_version": 1, "env": "Example-v0"}
    assert total == 5 * 8


def damage(path, column, key, raw):
    """Rewrite the Parquet file at ``path`` with its metadata ``key`` set to ``raw``: of
    ``column``'s field, or of the schema when ``column`` is None."""
    table = pq.read_table(path)
    schema = table.schema
    if column is None:
        schema = schema.with_metadata({**schema.metadata, key: raw})
    else:
        i = schema.get_field_index(column)
        field = schema.field(i)
        schema = schema.set(i, field.with_metadata({**field.metadata, key: raw}))
    pq.write_table(table.cast(schema), path)


@pytest.mark.parametrize(
    ("column", "key", "raw", "named"),
    [
        ("obs", b"shape", b"[3, 2", "column 'obs' field 'shape'"),
        ("obs", b"shape", b'{"rows": 3}', "column 'obs' field 'shape'"),
        ("obs", b"shape", b'[3, "2"]', "column 'obs' field 'shape'"),
        ("actions", b"dtype", b"<zz9", "column 'actions' field 'dtype'"),
        ("rewards", b"dtype", b"|O", "column 'rewards' field 'dtype'"),
        ("obs", b"dtype", b"\xff\xfe", "column 'obs' field 'dtype'"),
    ],
)
def test_damaged_column_metadata_is_named_with_the_file(tmp_path, column, key, raw, named):
    writer = PartWriter(str(tmp_path / "run"), "worker-1", {"env": "Example-v0"})
    writer.add(EpisodeRecorder().add(sampled(4, 1, ends={(3, 0)})))
    path = writer.flush()
    assert read_file(path)["obs"].shape == (4, 3, 2)  # whole before the damage
    damage(path, column, key, raw)
    with pytest.raises(ExperienceError, match="damaged metadata") as bad:
        read_file(path)
    assert str(bad.value).startswith(f"{path}: ") and named in str(bad.value)


@pytest.mark.parametrize("raw", [b"{not json", b'["env", "Example-v0"]'])
def test_damaged_file_metadata_is_named_with_the_file(tmp_path, raw):
    writer = PartWriter(str(tmp_path / "run"), "worker-1", {"env": "Example-v0"})
    writer.add(EpisodeRecorder().add(sampled(4, 1, ends={(3, 0)})))
    path = writer.flush()
    assert recorded_env(str(tmp_path / "run")) == "Example-v0"
    damage(path, None, b"hrl_tasks.experience", raw)
    with pytest.raises(ExperienceError, match="damaged metadata") as bad:
        recorded_env(str(tmp_path / "run"))
    assert path in str(bad.value) and "'hrl_tasks.experience'" in str(bad.value)


def test_multi_agent_trajectories_stay_whole_and_apart_in_one_episode():
    def trajectory(agent, n, start):
        columns = {"obs": np.arange(start, start + n, dtype=np.float32)[:, None],
                   "actions": np.zeros(n, np.int64), "rewards": np.ones(n, np.float32),
                   "terminateds": np.r_[np.zeros(n - 1, bool), True],
                   "truncateds": np.zeros(n, bool), "logp": np.zeros(n, np.float32),
                   "values": np.zeros(n, np.float32)}  # fmt: skip
        return trajectory_rows(columns, 7, agent, f"policy of {agent}")

    first, second = trajectory("player_1", 3, 0), trajectory("player_2", 2, 100)
    assert "values" not in first and first["t"].tolist() == [0, 1, 2]
    assert first["returns_to_go"].tolist() == [3.0, 2.0, 1.0]
    assert set(first["policy_id"]) == {"policy of player_1"}
    # interleaved as a turn-based game's rows are, in any order
    rows = {k: np.concatenate([first[k], second[k]]) for k in first}
    shuffled = {k: v[[4, 0, 3, 2, 1]] for k, v in rows.items()}
    ordered = {k: v[trajectory_order(shuffled)] for k, v in shuffled.items()}
    assert trajectory_starts(ordered).tolist() == [0, 3]
    assert ordered["obs"][:, 0].tolist() == [0, 1, 2, 100, 101]
    episodes = split_episodes(shuffled)  # per agent, not one episode of both
    assert [len(e["rewards"]) for e in episodes] == [3, 2]
    assert file_safe("policy of player_1/2") == "policy_of_player_1_2"
