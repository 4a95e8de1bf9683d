"""Dataflow operators in the style of RLlib Flow: algorithms as short plans.

A plan composes iterators and operators, e.g. PPO::

    rollouts = ParallelRollouts(workers, ctx, mode="bulk_sync")
    train_op = (rollouts.combine(ConcatBatches(4000))
                        .for_each(StandardizeFields(["advantages"]))
                        .for_each(TrainOneStep(workers, ctx)))
    return StandardMetricsReporting(train_op, ctx)

Metrics travel in an explicit :class:`FlowContext`, never a module global.
"""

from hrl_tasks.flow.concurrency import Concurrently, Dequeue, Enqueue
from hrl_tasks.flow.context import STEPS_SAMPLED, STEPS_TRAINED, FlowContext
from hrl_tasks.flow.iterators import LocalIterator, ParallelIterator
from hrl_tasks.flow.metrics import StandardMetricsReporting
from hrl_tasks.flow.replay_ops import (
    Replay,
    SetEpsilon,
    StoreToReplayBuffer,
    UpdatePriorities,
    UpdateTargetNetwork,
    linear_schedule,
)
from hrl_tasks.flow.rollout_ops import (
    ConcatBatches,
    ParallelRollouts,
    SelectExperiences,
    StandardizeFields,
)
from hrl_tasks.flow.train_ops import (
    ApplyGradients,
    AverageGradients,
    ComputeGradients,
    FeedLearner,
    TrainOneStep,
)

__all__ = [
    "STEPS_SAMPLED",
    "STEPS_TRAINED",
    "ApplyGradients",
    "AverageGradients",
    "ComputeGradients",
    "ConcatBatches",
    "Concurrently",
    "Dequeue",
    "Enqueue",
    "FeedLearner",
    "FlowContext",
    "LocalIterator",
    "ParallelIterator",
    "ParallelRollouts",
    "Replay",
    "SetEpsilon",
    "StoreToReplayBuffer",
    "UpdatePriorities",
    "UpdateTargetNetwork",
    "linear_schedule",
    "SelectExperiences",
    "StandardMetricsReporting",
    "StandardizeFields",
    "TrainOneStep",
]
