"""A3C's flat config: A2C's keys and the gradient requests in flight."""

from dataclasses import dataclass
from typing import ClassVar

from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.pg.config import A2CConfig


@dataclass
class A3CConfig(A2CConfig):
    """A2C's keys; ``num_async`` gradient requests are kept in flight per worker."""

    num_async: int = 1
    """Gradient requests in flight per worker."""
    min_steps_per_report: int = 256
    """Env steps per train() iteration."""
    num_learners: int = 0
    """0 (the default): the driver applies the gradients, each set passing through the
    driver's process. 1: a learner in a process of its own applies them
    (`hrl_tasks.rollout.async_learner.GradientLearner`): each set goes from its
    rollout worker to the learner, the driver passing a reference (needs
    ``direct_calls``), and the new weights come back with the learner's reply, for
    that worker's next sample call."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "num_workers": ">= 1",  # gradients come from remote workers only
        "num_async": ">= 1",
        "min_steps_per_report": ">= 0",
    }

    def check(self) -> None:
        super().check()
        if self.num_learners > 1:
            raise ConfigError(
                "A3CConfig.num_learners must be 0 (the driver applies the gradients) or 1 "
                "(one learner process applies them as they come: A3C's updates are one "
                f"worker's gradients each, which a data-parallel group would not share), "
                f"got {self.num_learners}"
            )
        if self.num_learners == 1 and not self.direct_calls:
            raise ConfigError(
                "A3CConfig.num_learners=1 needs direct_calls=True: the gradients stay on "
                "their rollout workers only on direct calls"
            )
