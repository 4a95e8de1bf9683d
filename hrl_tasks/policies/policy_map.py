"""Several policies behind one `Policy`: what multi-agent rollout workers and learners hold.

A multi-agent algorithm names its policies and maps agents to them::

    config = {
        "env": "tictactoe_v3",
        "policies": {"first": PolicySpec(), "second": PolicySpec("dqn", {"lr": 5e-4})},
        "policy_mapping_fn": lambda agent_id, episode: "first" if agent_id == "player_1" else "second",
        "policies_to_train": None,  # all of them
    }

A `PolicyMap` holds the policies and the mapping. Its weights and state are
dicts keyed by policy id, so a `WorkerSet` sends all policies' weights in one
broadcast, and ``learn_on_batch`` on a `MultiAgentBatch` trains each policy
to train on its own rows (its info keys prefixed ``"<policy id>/"``).

How policies see observations: an agent's Box observation as it is; a
PettingZoo ``Dict`` with ``observation`` and ``action_mask`` (the classic
games) as one flat float vector, the observation followed by the mask, in a
`MaskedBox` whose ``mask_size`` tells the models to give illegal actions no
probability (actor-critic) or no value (DQN), so every policy respects the
mask, in acting and in learning.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from hrl_tasks.data import MultiAgentBatch, SampleBatch
from hrl_tasks.errors import ConfigError
from hrl_tasks.policies.policy import Info, Policy
from hrl_tasks.policies.spaces import MaskedBox, UnsupportedSpaceError

PolicyID = Hashable
DEFAULT_POLICY = "default_policy"


@dataclass(frozen=True)
class PolicySpec:
    """How to build one policy of a multi-agent algorithm.

    Args:
        algorithm: The registered algorithm whose policy this is (``"ppo"``,
            ``"dqn"``); None: the algorithm being trained.
        config: That algorithm's keys for this policy (learning rate, network
            widths, batch sizes...), over the algorithm config's own.
        observation_space: The policy's observation space; None: that of the
            first agent mapped to it (as the env gives it).
        action_space: Likewise for actions.
        agent: The agent whose spaces the policy takes when they are not given;
            None: the first agent the mapping gives it. Checkpoints keep it, so a
            policy of its own agent (a hierarchy's low level) loads without the mapping.
    """

    algorithm: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    agent: Any = None


def as_policy_spec(spec: Any, owner: str = "policies", policy_id: Any = None) -> PolicySpec:
    """A `PolicySpec` from a spec, a dict of its fields, or None (the defaults).

    Raises:
        ValueError (a ``ConfigError``): naming the policy and what a spec may be.
    """
    if spec is None:
        return PolicySpec()
    if isinstance(spec, PolicySpec):
        return spec
    if isinstance(spec, Mapping):
        fields = {"algorithm", "config", "observation_space", "action_space", "agent"}
        unknown = sorted(set(spec) - fields)
        if not unknown:
            return PolicySpec(**spec)
        raise ConfigError(
            f"{owner}[{policy_id!r}] has no field {unknown}; a spec has {sorted(fields)}"
        )
    raise ConfigError(
        f"{owner}[{policy_id!r}] must be a PolicySpec (e.g. PolicySpec('dqn', {{'lr': 5e-4}})), "
        f"a dict of its fields or None; got {spec!r}"
    )


def policy_observation_space(space: gym.Space) -> gym.Space:
    """What a policy sees of an agent's observation space (see the module doc).

    Raises:
        UnsupportedSpaceError: for spaces other than a Box or a Dict of
            ``observation`` (a Box) and ``action_mask``.
    """
    if isinstance(space, gym.spaces.Box):
        return space
    if isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}:
        inner, mask = space["observation"], space["action_mask"]
        if isinstance(inner, gym.spaces.Box) and isinstance(mask, gym.spaces.Box):
            n = int(np.prod(mask.shape))
            low = np.concatenate(
                [np.asarray(inner.low, np.float32).ravel(), np.zeros(n, np.float32)]
            )
            high = np.concatenate(
                [np.asarray(inner.high, np.float32).ravel(), np.ones(n, np.float32)]
            )
            return MaskedBox(low, high, n)
    raise UnsupportedSpaceError(
        f"unsupported multi-agent observation space {space!r}; supported: a Box, or a Dict of "
        "'observation' (a Box) and 'action_mask' (PettingZoo's classic games)"
    )


def policy_observation(observation: Any) -> np.ndarray:
    """One agent's observation as its policy sees it: a dict of ``observation`` and
    ``action_mask`` becomes one float32 vector (mask last); arrays pass as they are."""
    if isinstance(observation, Mapping):
        inner = np.asarray(observation["observation"], np.float32).ravel()
        mask = np.asarray(observation["action_mask"], np.float32).ravel()
        return np.concatenate([inner, mask])
    return np.asarray(observation)


def mask_size(space: gym.Space | None) -> int:
    """How many trailing observation entries are an action mask (0: none)."""
    return int(getattr(space, "mask_size", 0))


class PolicyMap(Policy):
    """Policies by id, the agent-to-policy mapping, and which policies learn.

    Args:
        policies: policy id -> `Policy`.
        mapping_fn: ``mapping_fn(agent_id, episode) -> policy id`` (episode: an
            object with ``id``, the episode's id); None maps every agent to the
            only policy.
        policies_to_train: ids of the policies that learn; None: all.

    Raises:
        ValueError: for no policies, or an unknown id in ``policies_to_train``
            (several policies without a mapping can act, by id, but not sample).
    """

    def __init__(
        self,
        policies: Mapping[PolicyID, Policy],
        mapping_fn: Callable[[Any, Any], PolicyID] | None = None,
        policies_to_train: Iterable[PolicyID] | None = None,
    ) -> None:
        self.policies = dict(policies)
        if not self.policies:
            raise ValueError("a PolicyMap needs at least one policy")
        self.mapping_fn = mapping_fn
        trained = list(self.policies) if policies_to_train is None else list(policies_to_train)
        unknown = [pid for pid in trained if pid not in self.policies]
        if unknown:
            raise ValueError(
                f"policies_to_train names {unknown}, which are not among the policies "
                f"{sorted(map(str, self.policies))}"
            )
        self.policies_to_train = trained
        first = next(iter(self.policies.values()))
        super().__init__(first.observation_space, first.action_space, None)

    def __getitem__(self, policy_id: PolicyID) -> Policy:
        return self.policies[policy_id]

    def __iter__(self):
        return iter(self.policies)

    def __len__(self) -> int:
        return len(self.policies)

    def policy_id(self, agent_id: Any, episode: Any) -> PolicyID:
        """The policy that acts for ``agent_id`` in ``episode``.

        Raises:
            ValueError: if the mapping names a policy that does not exist.
        """
        if self.mapping_fn is None:
            if len(self.policies) > 1:
                raise ValueError(
                    f"policies {sorted(map(str, self.policies))} need a policy_mapping_fn("
                    "agent_id, episode) -> policy id to know who plays whom"
                )
            return next(iter(self.policies))
        pid = self.mapping_fn(agent_id, episode)
        if pid not in self.policies:
            raise ValueError(
                f"policy_mapping_fn({agent_id!r}, episode) returned {pid!r}, which is not among "
                f"the policies {sorted(map(str, self.policies))}"
            )
        return pid

    @property
    def shared_policy(self) -> PolicyID | None:
        """The id of the only policy, or None when there are several."""
        return next(iter(self.policies)) if len(self.policies) == 1 else None

    # Acting is per policy ---------------------------------------------------------

    def compute_actions(self, obs, explore=True):
        raise TypeError("a PolicyMap acts per policy: policy_map[policy_id].compute_actions(obs)")

    def loss(self, batch):
        raise TypeError("a PolicyMap has no loss of its own: policy_map[policy_id].loss(batch)")

    def compute_gradients(self, batch):
        raise TypeError("a PolicyMap learns per policy: use learn_on_batch(MultiAgentBatch)")

    def apply_gradients(self, grads):
        raise TypeError("a PolicyMap learns per policy: use learn_on_batch(MultiAgentBatch)")

    def learn_on_batch(self, batch: MultiAgentBatch | SampleBatch) -> Info:
        """Trains each policy to train on its rows of ``batch``; a plain SampleBatch
        goes to the only policy. Info keys are ``"<policy id>/<key>"``."""
        if isinstance(batch, SampleBatch):
            batch = MultiAgentBatch({self._only("learn on a SampleBatch"): batch}, len(batch))
        info: Info = {}
        for pid, rows in batch.items():
            if pid in self.policies_to_train and len(rows):
                for key, value in self.policies[pid].learn_on_batch(rows).items():
                    info[f"{pid}/{key}"] = value
        return info

    def _only(self, what: str) -> PolicyID:
        if len(self.policies) != 1:
            raise TypeError(f"cannot {what} with several policies; pass a MultiAgentBatch")
        return next(iter(self.policies))

    # Weights and state, keyed by policy id -----------------------------------------

    def get_weights(self) -> dict[PolicyID, dict[str, np.ndarray]]:
        return {pid: policy.get_weights() for pid, policy in self.policies.items()}

    def set_weights(self, weights: Mapping[PolicyID, dict[str, np.ndarray]]) -> None:
        for pid, policy_weights in weights.items():
            self.policies[pid].set_weights(policy_weights)

    def get_state(self) -> dict[str, Any]:
        return {str(pid): policy.get_state() for pid, policy in self.policies.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        missing = [str(pid) for pid in self.policies if str(pid) not in state]
        if missing:
            raise KeyError(f"the state has no policy {missing} (it has {sorted(state)})")
        for pid, policy in self.policies.items():
            policy.set_state(state[str(pid)])

    def get_rng_state(self) -> dict[str, Any]:
        return {str(pid): policy.get_rng_state() for pid, policy in self.policies.items()}

    def set_rng_state(self, state: Any) -> None:
        for pid, policy in self.policies.items():
            if state and str(pid) in state:
                policy.set_rng_state(state[str(pid)])

    def seed(self, seed: int) -> None:
        for index, policy in enumerate(self.policies.values()):
            policy.seed(int(np.random.SeedSequence([seed, index]).generate_state(1)[0] >> 1))

    def inference_copy(self) -> PolicyMap:
        """A map of the policies' inference copies (numpy actor-critics for MLPs)."""
        copies = {pid: policy.inference_copy() for pid, policy in self.policies.items()}
        return PolicyMap(copies, copy.copy(self.mapping_fn), self.policies_to_train)
