"""What the replay learners (DQN, SAC, TD3; Ape-X's shards) share: the replay keys,
the buffer, and how much to replay per env step.

One replay for all of them: `make_buffer` builds DQN's uniform or prioritized
buffer from the keys of `ReplayConfig`, and `ReplayRatio` decides how many batches
to replay after each sampling round: ``train_steps_per_round`` of them, or as many
as ``training_intensity`` (rows replayed per env step sampled) allows through a
`SampleToInsertRatio` limiter, so that learning per env step does not depend on
how fast the workers happen to run. With ``experience_input``, `MixedReplay` takes
``experience_mix`` of each replayed batch from a recording instead (read as tasks,
`hrl_tasks.flow.offline_ops.ReadExperience`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hrl_tasks.data import PrioritizedReplayBuffer, ReplayBuffer, SampleBatch
from hrl_tasks.data.rate_limiter import SampleToInsertRatio
from hrl_tasks.errors import ConfigError


@dataclass
class ReplayConfig:
    """The replay keys; each replay algorithm sets its own defaults."""

    buffer_size: int = 100_000
    """Rows the replay buffer keeps."""
    learning_starts: int = 1000
    """Rows in the buffer before learning starts."""
    train_batch_size: int = 64
    """Rows per gradient step."""
    train_steps_per_round: int | None = 128
    """Gradient steps after each sampling round (every worker's fragment); None when
    ``training_intensity`` sets the ratio instead."""
    training_intensity: float | None = None
    """Rows replayed per env step sampled (RLlib's key), held by a rate limiter: e.g.
    ``train_batch_size`` gives one gradient step per env step. None: the algorithm's
    own key sets the pace (``train_steps_per_round``; Ape-X's ``replay_batches_per_call``
    as fast as the learner goes); setting both is refused."""
    prioritized_replay: bool = False
    """Sample rows by TD error (Schaul et al. 2016) instead of uniformly."""
    prioritized_alpha: float = 0.6
    """How strongly priorities shape sampling (0 is uniform)."""
    prioritized_beta: float = 0.4
    """Importance-sampling correction of prioritized replay."""
    min_steps_per_report: int = 1000
    """Env steps per train() iteration."""
    experience_input: str | None = None
    """Recorded experience to learn from beside the live samples (a directory of
    Parquet files written with ``record_experience``, a glob or a file; any fsspec
    URL): each replayed batch takes ``experience_mix`` of its rows from it."""
    experience_mix: float = 0.5
    """With ``experience_input``: the share of each replayed batch read from it."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "buffer_size": ">= 1",
        "learning_starts": ">= 0",
        "train_batch_size": ">= 1",
        "train_steps_per_round": ">= 1",  # 0 would never train, and train() would wait forever
        "training_intensity": "> 0",
        "prioritized_alpha": ">= 0",
        "prioritized_beta": "[0, 1]",
        "min_steps_per_report": ">= 0",
        "experience_mix": "[0, 1]",
    }

    def check_replay(self, pace_key: str = "train_steps_per_round") -> None:
        """``training_intensity`` and the algorithm's own pace key: one of them, not both.

        Raises:
            ConfigError: naming both keys and how to keep either.
        """
        owner = type(self).__name__
        if self.experience_input is not None:
            self.check_experience()
        pace = getattr(self, pace_key)
        if self.training_intensity is not None and pace is not None:
            raise ConfigError(
                f"{owner}.training_intensity must be None, or {owner}.{pace_key} must be: both "
                f"are set (training_intensity={self.training_intensity:g}, {pace_key}={pace}), "
                "and only one of them may set the replay ratio"
            )
        if self.training_intensity is None and pace is None:
            raise ConfigError(
                f"{owner}.training_intensity must be set (replayed rows per env step), or "
                f"{owner}.{pace_key} must be: both are None"
            )

    def check_experience(self) -> None:
        """Recorded rows join uniform replay of one-step transitions only.

        Raises:
            ConfigError: with prioritized replay, n-step targets or replay shards.
        """
        owner = type(self).__name__
        if self.prioritized_replay:
            raise ConfigError(
                f"{owner}.prioritized_replay must be False with experience_input:"
                " recorded rows have no priorities"
            )
        if getattr(self, "n_step", 1) > 1:
            raise ConfigError(
                f"{owner}.n_step must be 1 with experience_input: recorded rows "
                "are one-step transitions"
            )
        if getattr(self, "num_replay_shards", 0):
            raise ConfigError(
                f"{owner}.num_replay_shards must be 0 with experience_input: the "
                "recording joins the driver's replay"
            )

    def check_buffer(self) -> None:
        """Replay starts once the buffer holds ``max(learning_starts, train_batch_size)``
        rows: a buffer of ``buffer_size`` rows must be able to."""
        for key in ("learning_starts", "train_batch_size"):
            if getattr(self, key) > self.buffer_size:
                raise ConfigError(
                    f"{type(self).__name__}.{key} must be <= buffer_size ({self.buffer_size}), "
                    f"got {getattr(self, key)}: replay would never start"
                )


def make_buffer(cfg: ReplayConfig):
    """The replay buffer of ``cfg``: prioritized or uniform."""
    if cfg.prioritized_replay:
        return PrioritizedReplayBuffer(
            cfg.buffer_size, alpha=cfg.prioritized_alpha, beta=cfg.prioritized_beta, seed=cfg.seed
        )
    return ReplayBuffer(cfg.buffer_size, seed=cfg.seed)


class ReplayRatio:
    """How many batches to replay after a sampling round. Pure.

    With ``training_intensity``, a `SampleToInsertRatio` whose error buffer is one
    batch: after every round, the rows replayed stay within one batch of
    ``training_intensity * (rows inserted - learning_starts)``. Without it, a fixed
    ``train_steps_per_round`` once the buffer holds ``max(learning_starts,
    train_batch_size)`` rows.
    """

    def __init__(self, cfg: ReplayConfig):
        self.batch_size = cfg.train_batch_size
        self.starts = max(cfg.learning_starts, cfg.train_batch_size)
        self.fixed = cfg.train_steps_per_round if cfg.training_intensity is None else None
        self.limiter = (
            None
            if cfg.training_intensity is None
            else SampleToInsertRatio(cfg.training_intensity, self.starts, cfg.train_batch_size)
        )
        self.inserted = 0

    def after_round(self, rows: int) -> int:
        """Counts ``rows`` inserted; returns the batches to replay now (counted as replayed)."""
        self.inserted += rows
        if self.limiter is None:
            return self.fixed if self.inserted >= self.starts else 0
        self.limiter.insert(rows)
        n = self.limiter.batches_allowed(self.batch_size)
        self.limiter.sample(n * self.batch_size)
        return n

    def state(self) -> dict:
        return {"inserted": self.inserted, **({} if self.limiter is None else self.limiter.state())}

    def restore(self, state: dict) -> None:
        self.inserted = int(state.get("inserted", 0))
        if self.limiter is not None and "sampled" in state:
            self.limiter.restore(state)


class MixedReplay:
    """A replay whose batches take ``recorded_rows`` rows from a recording (batches of
    that size from ``recorded``, e.g. `ReadExperience`) and the rest from ``buffer``;
    everything else is the buffer's."""

    def __init__(self, buffer, recorded, recorded_rows: int):
        self.buffer, self.recorded, self.recorded_rows = buffer, recorded, recorded_rows

    def __getattr__(self, name):
        return getattr(self.buffer, name)

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, n: int) -> SampleBatch:
        parts = [next(self.recorded)] if self.recorded_rows else []
        if n > self.recorded_rows:
            parts.append(self.buffer.sample(n - self.recorded_rows))
        common = set.intersection(*(set(p.keys()) for p in parts))
        return SampleBatch.concat_samples([SampleBatch({k: p[k] for k in common}) for p in parts])


def mixed_replay(buffer, cfg: ReplayConfig, engine, ctx):
    """``buffer``, or with ``experience_input`` a `MixedReplay` of it and the recording."""
    if cfg.experience_input is None:
        return buffer
    from hrl_tasks.data.experience import experience_files
    from hrl_tasks.flow.offline_ops import ReadExperience

    rows = int(round(cfg.experience_mix * cfg.train_batch_size))
    columns = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
    rng = np.random.default_rng(None if cfg.seed is None else cfg.seed + 2)
    recorded = ReadExperience(
        engine, experience_files(cfg.experience_input), ctx, max(rows, 1), rng, columns=columns
    )
    return MixedReplay(buffer, recorded, rows)


class ReplayAndLearn:
    """A synchronous replay learner's round, after its batch was stored: the batches
    `ReplayRatio` allows, each a learner step through ``learn(batch) -> (batch,
    info)`` (e.g. ``TrainOneStep`` then priorities and targets). Yields the round's
    batch; ``ctx.info["replay_ratio"]`` is the rows replayed per env step so far."""

    def __init__(self, buffer, ratio: ReplayRatio, learn, ctx):
        self.buffer, self.ratio, self.learn, self.ctx = buffer, ratio, learn, ctx

    def __call__(self, batch):
        for _ in range(self.ratio.after_round(batch.env_steps())):
            self.learn(self.buffer.sample(self.ratio.batch_size))
        if self.ratio.inserted:
            from hrl_tasks.flow.context import STEPS_TRAINED  # the flow imports the engine

            self.ctx.info["replay_ratio"] = self.ctx.counters[STEPS_TRAINED] / self.ratio.inserted
        return batch


def replay_state(buffer, ratio: ReplayRatio) -> dict:
    """What a checkpoint keeps of a replay in the driver: its sampling state and ratio
    (not its rows: a resumed run refills it)."""
    return {
        "replay_rows": len(buffer),
        "replay_rng": buffer.get_rng_state(),
        "replay_ratio": ratio.state(),
    }


def restore_replay(buffer, ratio: ReplayRatio, state: dict) -> None:
    """Loads `replay_state` from a checkpoint (entries a checkpoint lacks stay as they are)."""
    if "replay_rng" in state:
        buffer.set_rng_state(state["replay_rng"])
    if "replay_ratio" in state:
        ratio.restore(state["replay_ratio"])
