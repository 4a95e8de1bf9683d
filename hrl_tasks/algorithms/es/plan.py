"""ES's plan: rounds of antithetic perturbation tasks, then one update in the driver."""

import secrets

from hrl_tasks.algorithms.algorithm import Algorithm
from hrl_tasks.algorithms.es.config import ESConfig
from hrl_tasks.algorithms.es.evaluate import Evaluator, NoiseTableConfig, NoiseTablePolicy
from hrl_tasks.algorithms.es.ops import ESTrainStep, PerturbationRounds
from hrl_tasks.envs import resolve_env
from hrl_tasks.flow import StandardMetricsReporting


class ES(Algorithm):
    """Evolution strategies (Salimans et al. 2017, https://arxiv.org/abs/1703.03864) on a Dask cluster.

    ``episode_return_mean`` is over the last perturbed episodes (both signs);
    ``info["theta_return_mean"]`` is the unperturbed policy's; ``env_steps_sampled``
    counts the steps of every episode of both.
    """

    name = "es"
    policy_class = NoiseTablePolicy
    policy_config_class = NoiseTableConfig
    config_class = ESConfig

    def num_rollout_workers(self) -> int:
        return 0  # no rollout workers: the episodes run inside the perturbation tasks

    def build_plan(self, workers, ctx):
        cfg = self.config
        policy = workers.local_worker.policy
        evaluator = Evaluator(
            resolve_env(cfg.env),
            dict(cfg.env_config),
            policy.observation_space,
            policy.action_space,
            policy.config,
            cfg.episodes_per_perturbation,
            cfg.max_episode_steps,
        )
        seed = secrets.randbits(63) if cfg.seed is None else cfg.seed
        # Each round: theta to the cluster once, num_perturbations pure tasks (retried,
        # speculative) each returning the returns at theta + sigma eps and theta - sigma eps.
        rounds = PerturbationRounds(
            workers.engine,
            policy,
            evaluator,
            ctx,
            cfg.num_perturbations,
            cfg.theta_eval_episodes,
            seed,
        )
        # Centered ranks of the returns -> ES gradient -> Adam step, in the driver.
        train_op = rounds.for_each(ESTrainStep(policy, ctx))
        return StandardMetricsReporting(train_op, ctx, engine=workers.engine)
