"""What the algorithms that learn from recorded experience share: their keys, and a
plan of batches read as tasks, gradient steps, evaluations and off-policy estimates."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.config import ConfigError
from hrl_tasks.algorithms.offline_config import ESTIMATOR_NAMES
from hrl_tasks.algorithms.sac.plan import UpdateTargets
from hrl_tasks.data import SampleBatch
from hrl_tasks.data.experience import experience_files, read_file
from hrl_tasks.flow import StandardMetricsReporting, TrainOneStep
from hrl_tasks.flow.iterators import LocalIterator
from hrl_tasks.flow.offline_ops import ReadExperience
from hrl_tasks.policies.off_policy_estimation import (
    doubly_robust,
    importance_sampling,
    split_episodes,
    weighted_importance_sampling,
)

ESTIMATORS = {"is": importance_sampling, "wis": weighted_importance_sampling, "dr": doubly_robust}
assert tuple(ESTIMATORS) == ESTIMATOR_NAMES
"""Off-policy estimators by the names ``off_policy_estimators`` takes (``dr`` fits a Q
model of the learned policy first: `hrl_tasks.policies.fqe`)."""
DRAWN_ACTIONS = 10
"""Box actions: actions drawn from the learned policy per state for ``V(s)`` (DR)."""


class OfflineAlgorithm(Algorithm):
    """An algorithm whose batches are read from a recording (`ReadExperience`): no
    rollout workers; ``num_workers`` worker processes read the files; the driver learns,
    evaluates every ``evaluation_interval`` iterations and estimates off-policy."""

    columns: ClassVar[tuple[str, ...]] = ("obs", "actions", "rewards", "terminateds", "truncateds")
    """The recorded columns the learner reads."""
    moves_targets: ClassVar[bool] = False
    """Whether each gradient step is followed by the policy's target update when due
    (CQL's and IQL's critics)."""

    def num_rollout_workers(self) -> int:
        return 0  # the worker processes read the experience; the driver evaluates

    def check_before_cluster(self, policy) -> None:
        """Also: a recording to learn from is named.

        Raises:
            ConfigError: without ``experience_input``.
        """
        super().check_before_cluster(policy)
        if self.config.experience_input is None:
            raise ConfigError(
                f"{type(self.config).__name__}.experience_input is required: the recording to "
                "learn from (a directory of Parquet files written with record_experience; "
                "hrl-tasks train ... --train-from DIR)"
            )

    def postprocess(self):
        """What the reading task applies to each file's whole episodes (None: nothing)."""
        return None

    def learn_op(self, workers, ctx):
        """One gradient step on a batch, and the targets moved (`moves_targets`)."""
        train = TrainOneStep(workers, ctx, sync_weights=False)
        if not self.moves_targets:
            return train
        targets = UpdateTargets(workers, ctx)
        return lambda batch: targets(train(batch))

    def build_plan(self, workers, ctx):
        cfg = self.config
        self.experience, self.estimates_made = experience_files(cfg.experience_input), 0
        rng = np.random.default_rng(None if cfg.seed is None else cfg.seed + 1)
        batches = ReadExperience(
            self.engine,
            self.experience,
            ctx,
            cfg.train_batch_size,
            rng,
            columns=self.columns,
            postprocess=self.postprocess(),
            window=cfg.shuffle_window,
        )
        train = batches.for_each(self.learn_op(workers, ctx))

        def iterations():
            done = 0
            while True:
                for _ in range(cfg.updates_per_iteration):
                    next(train)
                done += 1
                if cfg.evaluation_interval and done % cfg.evaluation_interval == 0:
                    with ctx.timer("evaluate"):
                        result = self.evaluate()
                    ctx.add_episodes(
                        {
                            "episode_returns": result["evaluation_returns"],
                            "episode_lengths": result["evaluation_lengths"],
                        }
                    )
                    with ctx.timer("estimate"):
                        ctx.info.update(self.off_policy_estimates())
                yield None

        return StandardMetricsReporting(
            LocalIterator(iterations(), "Offline"), ctx, engine=self.engine
        )

    def fitted_values(self, policy, rows: dict, path: str) -> dict[str, np.ndarray]:
        """``q`` (of each recorded action) and ``v`` of the learned policy at each row,
        from fitted Q evaluation on the file's transitions (the doubly robust estimate's).

        For Box actions ``V`` is the mean of ``Q`` over `DRAWN_ACTIONS` actions drawn
        from the policy at each state.

        Raises:
            ConfigError: for a recording without ``next_obs``.
        """
        import gymnasium as gym

        from hrl_tasks.policies.fqe import ContinuousFittedQEvaluation, FittedQEvaluation

        if "next_obs" not in rows:
            raise ConfigError(
                f"off_policy_estimators 'dr' needs next_obs in the recording ({path} has the "
                f"columns {sorted(rows)}); use 'is' or 'wis'"
            )
        obs_dim, gamma, seed = (
            int(np.prod(rows["obs"].shape[1:])),
            self.config.gamma,
            self.config.seed,
        )
        if isinstance(policy.action_space, gym.spaces.Discrete):
            fqe = FittedQEvaluation(obs_dim, int(policy.action_space.n), gamma, seed=seed)
            fqe.fit(rows, policy.action_probs(rows["next_obs"]))
            q_all = fqe.q_values(rows["obs"])
            taken = q_all[np.arange(len(q_all)), rows["actions"].astype(int)]
            return {"q": taken, "v": (policy.action_probs(rows["obs"]) * q_all).sum(-1)}
        action_dim = int(np.prod(policy.action_space.shape))
        fqe = ContinuousFittedQEvaluation(obs_dim, action_dim, gamma, seed=seed)
        fqe.fit(rows, policy.sample_actions(rows["next_obs"], DRAWN_ACTIONS))
        recorded = np.asarray(rows["actions"], np.float32).reshape(len(rows["obs"]), 1, -1)
        taken = fqe.q_values(rows["obs"], recorded)[:, 0]
        drawn = policy.sample_actions(rows["obs"], DRAWN_ACTIONS)
        return {"q": taken, "v": fqe.q_values(rows["obs"], drawn).mean(-1)}

    def off_policy_estimates(self) -> dict[str, float]:
        """The learned policy's discounted return estimated from one recorded file's
        episodes (the next file each time) by each of ``off_policy_estimators`` (None: IS
        and WIS where the recording has the behaviour's ``logp`` and the policy gives
        the log-probability of an action), as ``estimate/<name>``.

        Raises:
            ConfigError: for estimators asked of a recording without ``logp``, or of a
                policy without ``action_logp``.
        """
        cfg, asked = self.config, self.config.off_policy_estimators
        names = ("is", "wis") if asked is None else tuple(asked)
        policy = self.workers.learner
        if not names or (asked is None and not hasattr(policy, "action_logp")):
            return {}
        if not hasattr(policy, "action_logp"):
            raise ConfigError(
                f"{self.name} cannot give off-policy estimates: its policy gives "
                "no log-probability of an action; set off_policy_estimators=[]"
            )
        self.estimates_made += 1
        path = self.experience[self.estimates_made % len(self.experience)]  # file after file
        rows = self.engine.submit(read_file, path, name="read-experience").result()
        if "logp" not in rows:
            if asked is None:
                return {}
            raise ConfigError(
                f"off_policy_estimators {list(names)} need the behaviour policy's logp, which "
                f"{path} does not have (recordings of PPO, A2C, IMPALA and APPO do); set "
                "off_policy_estimators=[] to train without them"
            )
        rows["target_logp"] = policy.action_logp(
            SampleBatch({"obs": rows["obs"], "actions": rows["actions"]})
        )
        if "dr" in names:
            rows.update(self.fitted_values(policy, rows, path))
        episodes = split_episodes(rows)
        return {f"estimate/{n}": ESTIMATORS[n](episodes, cfg.gamma) for n in names}
