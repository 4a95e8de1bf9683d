"""Rainbow's config: DQN's keys with each of Rainbow's parts on."""

from dataclasses import dataclass

from hrl_tasks.algorithms.dqn.config import DQNConfig


@dataclass
class RainbowConfig(DQNConfig):
    """DQN's keys (`DQNConfig`) with the defaults of Rainbow (Hessel et al. 2018,
    https://arxiv.org/abs/1710.02298): double Q and a dueling head (as DQN's), 3-step
    targets, prioritized replay, C51's distribution over 51 atoms and noisy layers in
    place of epsilon-greedy. Each part is a key, so an ablation is a ``--set``
    (``noisy=false``, ``num_atoms=1``, ``n_step=1``, ``prioritized_replay=false``).
    As RLlib's Rainbow is its DQN's config, this is DQN's plan; Ape-X takes the same
    keys (distributed Rainbow).
    """

    n_step: int = 3
    prioritized_replay: bool = True
    prioritized_alpha: float = 0.5
    """The Rainbow paper's omega."""
    num_atoms: int = 51
    v_min: float = -100.0
    v_max: float = 100.0
    """The support covers returns of rewards within [-1, 1] discounted by 0.99 (100 at
    most), CartPole's among them; the paper's -10 and 10 fit clipped Atari rewards with
    its episodes' returns (``--set v_min=-10 --set v_max=10``)."""
    noisy: bool = True
    epsilon_start: float = 0.0
    """Not used with ``noisy`` (its noise explores); it applies again with ``noisy=false``."""
    epsilon_end: float = 0.0
