"""Turning a plan's output into the metrics dict of ``Algorithm.train()``."""

from __future__ import annotations

import time

import numpy as np

from hrl_tasks.flow.context import ROWS_READ, STEPS_SAMPLED, STEPS_TRAINED, FlowContext
from hrl_tasks.flow.iterators import LocalIterator


def StandardMetricsReporting(
    train_op: LocalIterator, ctx: FlowContext, min_steps_per_report: int = 0, engine=None
) -> LocalIterator:
    """One metrics dict per iteration of the plan.

    An iteration runs ``train_op`` until at least ``min_steps_per_report`` more
    env steps were sampled (one item if 0). The dict holds
    ``episode_return_mean``, ``episode_len_mean``, ``episodes_total``,
    ``env_steps_sampled``, ``env_steps_trained``, ``time_s`` per stage, the
    learner's info, and the engine's statistics when an engine is given. In
    multi-agent runs an episode's return is the sum over its agents, and
    ``policy_return_mean/<policy id>`` is the mean return of the agents each
    policy played.
    """

    def reports():
        start = time.perf_counter()
        while True:
            steps_before = ctx.counters[STEPS_SAMPLED]
            timers_before = dict(ctx.timers)
            while True:
                next(train_op)
                if ctx.counters[STEPS_SAMPLED] - steps_before >= min_steps_per_report:
                    break
            yield report(ctx, timers_before, time.perf_counter() - start, engine)

    return LocalIterator(reports(), "StandardMetricsReporting")


def report(ctx: FlowContext, timers_before: dict, wall_s: float, engine=None) -> dict:
    returns = np.asarray(ctx.episode_returns, dtype=float)
    lengths = np.asarray(ctx.episode_lengths, dtype=float)
    metrics = {
        "episode_return_mean": float(returns.mean()) if returns.size else float("nan"),
        "episode_return_max": float(returns.max()) if returns.size else float("nan"),
        "episode_len_mean": float(lengths.mean()) if lengths.size else float("nan"),
        "episodes_total": int(ctx.counters["episodes_total"]),
        STEPS_SAMPLED: int(ctx.counters[STEPS_SAMPLED]),
        STEPS_TRAINED: int(ctx.counters[STEPS_TRAINED]),
        "env_errors": int(ctx.counters["env_errors"]),
        "time_total_s": wall_s,
        "time_s": {k: v - timers_before.get(k, 0.0) for k, v in ctx.timers.items()},
        "info": dict(ctx.info),
    }
    if ctx.counters.get(ROWS_READ):  # an offline plan's
        metrics[ROWS_READ] = int(ctx.counters[ROWS_READ])
    for pid, values in ctx.policy_returns.items():
        metrics[f"policy_return_mean/{pid}"] = float(np.mean(values)) if values else float("nan")
    if engine is not None:
        stats = engine.stats()
        metrics["engine"] = {k: v for k, v in stats.items() if k != "by_name"}
    return metrics
