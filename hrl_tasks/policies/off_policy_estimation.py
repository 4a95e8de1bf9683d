"""Off-policy estimates of a policy's return from episodes another policy recorded.

Pure numpy over whole episodes: each episode is given by its rewards, the behaviour
policy's log-probabilities of the recorded actions (``logp``, as recorded) and the
target policy's log-probabilities of the same actions. With the per-step ratios
``rho_t = pi(a_t|s_t) / mu(a_t|s_t)`` and their running products
``w_t = rho_0 ... rho_t``:

* per-decision importance sampling (Precup et al. 2000):
  ``V = mean over episodes of sum_t gamma^t w_t r_t``;
* weighted importance sampling: the same with each ``w_t`` divided by the mean of
  ``w_t`` over every episode, ended ones at their final weight (biased, lower
  variance);
* doubly robust (Jiang and Li 2016): ``V_DR(t) = V(s_t) + rho_t (r_t + gamma V_DR(t+1)
  - Q(s_t, a_t))`` from the end of each episode back, ``V`` and ``Q`` from a fitted
  model of the target policy's values (``V(s) = sum_a pi(a|s) Q(s, a)``).

RLlib's `ImportanceSampling` and `DoublyRobust` compute the same quantities; its
`WeightedImportanceSampling` normalizes each step over the episodes still running,
which `weighted_importance_sampling` does not (see there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hrl_tasks.data.experience import trajectory_order, trajectory_starts


def _checked(episodes: Sequence[dict[str, np.ndarray]], *names: str) -> None:
    if not episodes:
        raise ValueError("no episodes to estimate from")
    for name in names:
        missing = [i for i, e in enumerate(episodes) if name not in e]
        if missing:
            raise ValueError(
                f"episode {missing[0]} has no {name!r}: the estimates need the behaviour "
                "policy's log-probabilities (logp), which recordings of PPO, A2C, IMPALA and "
                "APPO have"
            )


def step_weights(episode: dict[str, np.ndarray]) -> np.ndarray:
    """``w_t``: the running product of ``pi / mu`` over the episode's steps."""
    return np.exp(np.cumsum(episode["target_logp"] - episode["logp"]))


def importance_sampling(episodes: Sequence[dict[str, np.ndarray]], gamma: float) -> float:
    """Per-decision importance sampling estimate of the target policy's return."""
    _checked(episodes, "logp", "target_logp", "rewards")
    values = []
    for episode in episodes:
        discounts = gamma ** np.arange(len(episode["rewards"]))
        values.append(float(np.sum(discounts * step_weights(episode) * episode["rewards"])))
    return float(np.mean(values))


def weighted_importance_sampling(episodes: Sequence[dict[str, np.ndarray]], gamma: float) -> float:
    """Weighted per-decision importance sampling: each step's weight over the mean weight
    at that step over every episode, an episode that has ended counting with its final
    weight (as if it went on in an absorbing state with ratio 1: Jiang and Li 2016,
    Thomas and Brunskill 2016). Normalizing over only the episodes still running (as
    RLlib does) would make the estimate blind to how long the target's episodes last:
    with a constant reward it returns the behaviour's own value."""
    _checked(episodes, "logp", "target_logp", "rewards")
    weights = [step_weights(e) for e in episodes]
    longest = max(len(w) for w in weights)
    padded = np.stack([np.pad(w, (0, longest - len(w)), mode="edge") for w in weights])
    mean_weight = padded.mean(axis=0)
    values = []
    for episode, w in zip(episodes, weights, strict=True):
        steps = len(w)
        normalized = np.divide(
            w, mean_weight[:steps], out=np.zeros(steps), where=mean_weight[:steps] > 0
        )
        discounts = gamma ** np.arange(steps)
        values.append(float(np.sum(discounts * normalized * episode["rewards"])))
    return float(np.mean(values))


def doubly_robust(episodes: Sequence[dict[str, np.ndarray]], gamma: float) -> float:
    """Doubly robust estimate; each episode also needs ``q`` (``Q(s_t, a_t)``) and ``v``
    (``V(s_t)``) of the target policy from a fitted model."""
    _checked(episodes, "logp", "target_logp", "rewards", "q", "v")
    values = []
    for episode in episodes:
        rho = np.exp(episode["target_logp"] - episode["logp"])
        estimate = 0.0
        for t in reversed(range(len(episode["rewards"]))):
            estimate = episode["v"][t] + rho[t] * (
                episode["rewards"][t] + gamma * estimate - episode["q"][t]
            )
        values.append(float(estimate))
    return float(np.mean(values))


def split_episodes(rows: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Rows of whole episodes (any order) as one dict per episode, steps in order (in
    a multi-agent recording: per agent's trajectory)."""
    order = trajectory_order(rows)
    ordered = {k: v[order] for k, v in rows.items()}
    bounds = [*trajectory_starts(ordered), len(order)]
    return [
        {k: v[a:b] for k, v in ordered.items()}
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
