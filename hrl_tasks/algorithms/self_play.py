"""Self-play against a small league: one policy learns, frozen snapshots of it play back.

Usage, PPO on Connect Four::

    league = SelfPlay(agents=("player_0", "player_1"), snapshots=4, snapshot_every=5)
    algo = PPO({"env": "connect_four_v3", **league.config()})

``league.config()`` gives the multi-agent keys: the policies (``"main"``, which
learns, and ``"snapshot_0"``...), the mapping and ``on_train_result``. In each
episode the main policy takes one seat, alternating with the episode id; the
other seat goes to the main policy itself (with probability ``self_play``) or
to one of the snapshots. Every ``snapshot_every`` iterations the main policy's
weights replace the oldest snapshot, so the opponents follow the learner a few
steps behind (the "fictitious self-play" of a league, kept small).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hrl_tasks.policies.policy_map import PolicySpec

MAIN = "main"


class SelfPlay:
    """The policies, mapping and snapshot schedule of a self-play league.

    Args:
        agents: The env's two agent ids, in seat order (PettingZoo's ``possible_agents``).
        snapshots: Frozen copies of the main policy that play as opponents.
        snapshot_every: Iterations between copies of the main policy into a snapshot.
        self_play: Probability that the opponent is the main policy itself.
        spec: The main policy's spec (its algorithm's keys); snapshots share it.
        seed: Mixed with each episode id to choose the opponent.

    Raises:
        ValueError: for other than two agents, or counts out of range.
    """

    def __init__(
        self,
        agents: Sequence[Any],
        snapshots: int = 4,
        snapshot_every: int = 5,
        self_play: float = 0.2,
        spec: PolicySpec | None = None,
        seed: int = 0,
    ) -> None:
        if len(agents) != 2:
            raise ValueError(f"self-play needs the two agents of a two-player game, got {agents}")
        if snapshots < 1 or snapshot_every < 1 or not 0.0 <= self_play <= 1.0:
            raise ValueError(
                "need snapshots >= 1, snapshot_every >= 1 and self_play in [0, 1]; got "
                f"{snapshots}, {snapshot_every}, {self_play}"
            )
        self.agents = tuple(agents)
        self.snapshot_ids = [f"snapshot_{i}" for i in range(snapshots)]
        self.snapshot_every = int(snapshot_every)
        self.self_play = float(self_play)
        self.spec = spec or PolicySpec()
        self.seed = int(seed)
        self.snapshots_taken = 0

    def config(self) -> dict[str, Any]:
        """The algorithm config keys of the league."""
        return {
            "policies": {MAIN: self.spec, **{pid: self.spec for pid in self.snapshot_ids}},
            "policy_mapping_fn": self,
            "policies_to_train": [MAIN],
            "on_train_result": self.on_train_result,
        }

    def __call__(self, agent_id: Any, episode: Any) -> str:
        """The policy of ``agent_id`` in ``episode`` (the mapping function)."""
        if agent_id not in self.agents:
            raise ValueError(
                f"SelfPlay was given the agents {list(self.agents)}, and the env has "
                f"{agent_id!r}: give SelfPlay the env's possible_agents"
            )
        main_seat = episode.id % 2
        if agent_id == self.agents[main_seat]:
            return MAIN
        rng = np.random.default_rng([self.seed, episode.id & (2**62 - 1)])
        if rng.random() < self.self_play:
            return MAIN
        return self.snapshot_ids[int(rng.integers(len(self.snapshot_ids)))]

    def on_train_result(self, algo: Any, result: dict) -> None:
        """Every ``snapshot_every`` iterations, copy the main policy over the oldest
        snapshot (the rollout workers get it with their next weights)."""
        if result["iteration"] % self.snapshot_every == 0:
            policies = algo.policy
            slot = self.snapshot_ids[self.snapshots_taken % len(self.snapshot_ids)]
            policies[slot].set_weights(policies[MAIN].get_weights())
            self.snapshots_taken += 1
            algo.workers.sync_weights(defer=True)
        result["league/snapshots_taken"] = self.snapshots_taken
