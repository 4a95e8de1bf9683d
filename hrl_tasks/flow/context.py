"""The metrics context that travels with a dataflow plan (never a module global).

Every operator of a plan receives the same :class:`FlowContext`; it counts env
steps sampled and trained, times stages, keeps the latest learner info and the
recent episodes, so :class:`~hrl_tasks.flow.metrics.StandardMetricsReporting`
can report them.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

STEPS_SAMPLED = "env_steps_sampled"
STEPS_TRAINED = "env_steps_trained"
ROWS_READ = "experience_rows_read"
"""Rows of recorded experience read (`hrl_tasks.flow.offline_ops.ReadExperience`)."""


@dataclass
class FlowContext:
    """Counters, stage timers, learner info and episode statistics of one plan.

    Example::

        ctx = FlowContext()
        with ctx.timer("sample"):
            batch = sample()
        ctx.counters[STEPS_SAMPLED] += len(batch)
    """

    history: int = 100
    counters: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    timers: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    info: dict[str, float] = field(default_factory=dict)
    episode_returns: deque = field(default_factory=deque)
    episode_lengths: deque = field(default_factory=deque)
    policy_returns: dict[str, deque] = field(default_factory=dict)
    """Multi-agent: policy id -> the returns of the agents it played, per episode."""

    def __post_init__(self):
        self.episode_returns = deque(self.episode_returns, maxlen=self.history)
        self.episode_lengths = deque(self.episode_lengths, maxlen=self.history)
        self.policy_returns = {
            str(pid): deque(values, maxlen=self.history)
            for pid, values in self.policy_returns.items()
        }

    @contextlib.contextmanager
    def timer(self, stage: str):
        """Add the time spent in the block to ``timers[stage]`` (seconds)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timers[stage] += time.perf_counter() - start

    def add_episodes(self, metrics: dict) -> None:
        """Take the episode returns and lengths a rollout worker reported."""
        returns = list(metrics.get("episode_returns", ()))
        self.episode_returns.extend(returns)
        self.episode_lengths.extend(metrics.get("episode_lengths", ()))
        self.counters["episodes_total"] += len(returns)
        for pid, values in metrics.get("policy_returns", {}).items():
            kept = self.policy_returns.setdefault(str(pid), deque(maxlen=self.history))
            kept.extend(values)

    def state(self) -> dict:
        """Plain data for checkpoints."""
        return {
            "counters": dict(self.counters),
            "timers": dict(self.timers),
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "policy_returns": {pid: list(values) for pid, values in self.policy_returns.items()},
        }

    def restore(self, state: dict) -> None:
        self.counters = defaultdict(int, state["counters"])
        self.timers = defaultdict(float, state["timers"])
        self.episode_returns = deque(state["episode_returns"], maxlen=self.history)
        self.episode_lengths = deque(state["episode_lengths"], maxlen=self.history)
        self.policy_returns = {
            pid: deque(values, maxlen=self.history)
            for pid, values in state.get("policy_returns", {}).items()
        }
