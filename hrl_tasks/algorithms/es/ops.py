"""ES's dataflow operators: rounds of perturbation tasks, and the update in the driver."""

from __future__ import annotations

import time
from concurrent.futures import CancelledError
from dataclasses import dataclass

import numpy as np

from hrl_tasks.algorithms.es.evaluate import (
    Evaluator,
    NoiseTablePolicy,
    evaluate_pair,
    evaluate_theta,
)
from hrl_tasks.data import SampleBatch
from hrl_tasks.flow import STEPS_SAMPLED, STEPS_TRAINED, FlowContext, LocalIterator
from hrl_tasks.policies import NOISE_SEEDS, RETURNS
from hrl_tasks.scheduler import WorkerLostError

LOST = (CancelledError, WorkerLostError)  # what a round sends again
ROUNDS = "es_rounds"  # a FlowContext counter: saved in checkpoints, so indices continue on restore


@dataclass
class ESRound:
    """The outcome of one round: the ES batch and what the report needs."""

    batch: SampleBatch
    """``noise_seeds`` (table indices) ``[n]`` and ``returns`` ``[n, 2]``."""
    env_steps: int
    wall_s: float
    theta_returns: list[float]


def PerturbationRounds(
    engine,
    policy: NoiseTablePolicy,
    evaluator: Evaluator,
    ctx: FlowContext,
    num_perturbations: int,
    theta_episodes: int,
    seed: int,
) -> LocalIterator:
    """Each step: one round of antithetic perturbations of the policy's current weights.

    Theta goes to the cluster once per round (``engine.put``); each of the
    ``num_perturbations`` tasks gets it as a dependency plus a noise index and an
    env seed, both drawn in the driver from ``(seed, round)``, so every task is
    pure: retried up to twice, and backed up on an idle worker when it straggles.
    ``theta_episodes`` more episodes of the unperturbed policy run alongside.
    Steps and the perturbed episodes go to ``ctx``.
    """

    def rounds():
        while True:
            start = time.perf_counter()
            rng = np.random.default_rng([seed, ctx.counters[ROUNDS]])
            indices = rng.integers(0, policy.max_noise_index, num_perturbations)
            env_seeds = rng.integers(0, 2**30, num_perturbations + 1)  # + k for episode k
            pair_seeds = env_seeds[:num_perturbations]
            jobs = [
                (evaluate_pair, (int(i), int(s))) for i, s in zip(indices, pair_seeds, strict=True)
            ]
            if theta_episodes:
                jobs.append((evaluate_theta, (int(env_seeds[-1]), theta_episodes)))
            with ctx.timer("sample"):
                results = run_round(engine, evaluator, policy.get_flat(), jobs)
            pairs, plain = results[:num_perturbations], results[num_perturbations:]
            ctx.counters[ROUNDS] += 1
            steps = sum(r["env_steps"] for r in results)
            ctx.counters[STEPS_SAMPLED] += steps
            ctx.add_episodes(
                {
                    "episode_returns": [x for r in pairs for x in r["episode_returns"]],
                    "episode_lengths": [x for r in pairs for x in r["episode_lengths"]],
                }
            )
            batch = SampleBatch(
                {
                    NOISE_SEEDS: indices.astype(np.int64),
                    RETURNS: np.array([r["returns"] for r in pairs], np.float64),
                }
            )
            theta_returns = [x for r in plain for x in r["episode_returns"]]
            yield ESRound(batch, steps, time.perf_counter() - start, theta_returns)

    return LocalIterator(rounds(), "PerturbationRounds")


def run_round(engine, evaluator: Evaluator, theta: np.ndarray, jobs: list, resends: int = 2):
    """Run ``fn(evaluator, theta, *args)`` for each ``(fn, args)`` of ``jobs``; their results.

    Theta is put on every worker (every worker evaluates perturbations): no task
    waits for a worker that holds it to answer, and a frozen holder stalls none.
    A put value cannot be recomputed: if the workers holding it die, the tasks that need it (and finished results that died
    with it) come back cancelled rather than retried; a finished result whose
    second computation lost its worker too comes back as `WorkerLostError`.
    Those are sent again with theta put afresh; the tasks are pure, so the
    results are the same.
    """
    results: dict[int, dict] = {}
    pending = dict(enumerate(jobs))
    for resend in range(resends + 1):
        theta_ref = engine.put(theta, broadcast=True)  # every worker reads it
        refs = {
            i: engine.submit(
                fn,
                evaluator,
                theta_ref,
                *args,
                retries=2,
                speculative=True,
                name="es-perturbation" if fn is evaluate_pair else "es-theta",
            )
            for i, (fn, args) in pending.items()
        }
        try:
            results.update(zip(refs, engine.gather(list(refs.values())), strict=True))
            break
        except LOST:
            if resend == resends:
                raise
        pending = {}
        for i, ref in refs.items():
            try:
                results[i] = ref.result()
            except LOST:
                pending[i] = jobs[i]
    return [results[i] for i in range(len(jobs))]


class ESTrainStep:
    """The ES update in the driver: centered ranks -> gradient estimate -> Adam step.

    The policy's ``learn_on_batch`` does the math (`hrl_tasks.policies.es`).
    Info: the learner's, plus ``perturbations_per_s`` (antithetic pairs
    evaluated per second of the round) and ``theta_return_mean`` (the
    unperturbed policy's episodes this round, when there were any).
    """

    def __init__(self, policy: NoiseTablePolicy, ctx: FlowContext):
        self.policy = policy
        self.ctx = ctx

    def __call__(self, item: ESRound) -> dict:
        with self.ctx.timer("learn"):
            info = self.policy.learn_on_batch(item.batch)
        self.ctx.counters[STEPS_TRAINED] += item.env_steps
        self.ctx.info = {k: float(v) for k, v in info.items() if np.ndim(v) == 0}
        self.ctx.info["perturbations_per_s"] = len(item.batch) / max(item.wall_s, 1e-9)
        if item.theta_returns:
            self.ctx.info["theta_return_mean"] = float(np.mean(item.theta_returns))
        return self.ctx.info
