"""The policies' config dataclasses, with no torch: an algorithm's config (and so
``hrl-tasks train``'s check of it) reads them without importing the policies, whose
modules import torch. Each policy module offers its own config under the same name.

Each is ``<Kind>PolicyConfig``: ``<Kind>Config`` is the algorithm's
(``hrl_tasks.algorithms``). The old names, which these classes had too, still
resolve, with a ``DeprecationWarning`` (`renamed`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class PGPolicyConfig:
    """Config of `PGPolicy`; defaults are A2C's (advantages from a learned critic)."""

    lr: float = 7e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 1.0
    """GAE lambda: 1 gives Monte Carlo returns minus V, 0 one-step TD errors."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    use_critic: bool = True
    """False: vanilla PG, advantages are discounted returns (use whole episodes)."""
    normalize_advantages: bool = False
    """Standardize advantages within each batch the loss sees."""
    grad_clip: float | None = 0.5
    """Max global gradient norm; None disables clipping."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths after the encoder (use () on top of a CNN)."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic."""
    seed: int | None = None
    """Seed of the initial weights and of sampling; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "lam": "[0, 1]",
        "vf_coef": ">= 0",
        "ent_coef": ">= 0",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "seed": "[0, 2**63)",
    }
    """Each numeric key's range (None, where a key allows it, is always valid), checked
    by the algorithm configs and by ``hrl_tasks.algorithms.config.check_bounds``."""


@dataclass
class PPOPolicyConfig:
    """Config of `PPOPolicy`; defaults are CleanRL's."""

    lr: float = 2.5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    clip: float = 0.2
    """Surrogate clip range epsilon."""
    vf_clip: float | None = None
    """Clip range of the value change (PPO2 value clipping); None disables it."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (CleanRL uses 0 for continuous control)."""
    num_sgd_iter: int = 4
    """Epochs over the batch per `learn_on_batch`."""
    minibatch_size: int = 128
    """Rows per minibatch (the last one of an epoch may be smaller)."""
    normalize_advantages: bool = True
    """Standardize advantages within each minibatch."""
    target_kl: float | None = None
    """Stop the epochs early once the approximate KL exceeds this; None never stops."""
    grad_clip: float | None = 0.5
    """Max global gradient norm; None disables clipping."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths after the encoder (use () on top of a CNN)."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic (CleanRL keeps them separate)."""
    activation: str = "tanh"
    """Between hidden layers: ``"tanh"`` (CleanRL's) or ``"relu"`` (rl-zoo's MuJoCo settings)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of continuous actions (rl-zoo's MuJoCo settings: -2)."""
    normalize_rewards: bool = False
    """Divide rewards by the running standard deviation of the discounted return, on
    each rollout worker (Stable-Baselines3's ``VecNormalize(norm_reward=True)``, which
    rl-zoo's MuJoCo settings use); reported returns stay the env's."""
    normalize_observations: bool = False
    """Standardize observations by running statistics gathered on the rollout workers
    (Stable-Baselines3's ``VecNormalize``; rl-zoo's MuJoCo settings), kept in the
    weights and checkpoints."""
    seed: int | None = None
    """Seed of the initial weights, sampling and minibatch shuffling; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "lam": "[0, 1]",
        "clip": "> 0",
        "vf_clip": "> 0",
        "vf_coef": ">= 0",
        "ent_coef": ">= 0",
        "num_sgd_iter": ">= 1",
        "minibatch_size": ">= 1",
        "target_kl": "> 0",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "log_std_init": "[-20, 5]",
        "seed": "[0, 2**63)",
    }
    """Each numeric key's range (None, where a key allows it, is always valid), checked
    by the algorithm configs and by ``hrl_tasks.algorithms.config.check_bounds``."""


@dataclass
class IMPALAPolicyConfig:
    """Config of `IMPALAPolicy`; defaults follow the paper and RLlib (Adam instead of RMSProp)."""

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    clip_rho_threshold: float | None = 1.0
    """V-trace rho-bar; None disables clipping."""
    clip_c_threshold: float | None = 1.0
    """V-trace c-bar; None disables clipping."""
    clip_pg_rho_threshold: float | None = 1.0
    """Clip of the policy-gradient importance weight; None disables it."""
    rollout_fragment_length: int | None = None
    """None: a batch is one time-major fragment. L: a batch is fragments of L rows each, concatenated."""
    grad_clip: float | None = 40.0
    """Max global gradient norm; None disables clipping."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths after the encoder (use () on top of a CNN)."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic."""
    seed: int | None = None
    """Seed of the initial weights and of sampling; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "vf_coef": ">= 0",
        "ent_coef": ">= 0",
        "clip_rho_threshold": "> 0",
        "clip_c_threshold": "> 0",
        "clip_pg_rho_threshold": "> 0",
        "rollout_fragment_length": ">= 1",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "seed": "[0, 2**63)",
    }
    """Each numeric key's range (None, where a key allows it, is always valid), checked
    by the algorithm configs and by ``hrl_tasks.algorithms.config.check_bounds``."""


@dataclass
class APPOPolicyConfig(IMPALAPolicyConfig):
    """Config of `APPOPolicy`: IMPALA's keys, the clip range and the passes per batch."""

    clip: float = 0.2
    """Surrogate clip range epsilon."""
    num_sgd_iter: int = 1
    """Gradient steps on each batch in `learn_on_batch`, V-trace recomputed before each
    (RLlib's ``num_sgd_iter`` of the learner)."""

    BOUNDS: ClassVar[dict[str, str]] = {"clip": "> 0", "num_sgd_iter": ">= 1"}
    """The ranges of the keys added to IMPALA's (``bounds_of`` merges them)."""


@dataclass
class DQNPolicyConfig:
    """Config of `DQNPolicy`; defaults follow CleanRL's dqn.py with double Q and dueling on."""

    lr: float = 2.5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 1
    """Rewards summed per target; > 1 makes `postprocess_trajectory` rewrite rows."""
    double_q: bool = True
    """Pick the next action with the online network, evaluate it with the target one."""
    dueling: bool = True
    """Dueling value/advantage head."""
    huber_delta: float = 1.0
    """Huber loss threshold on the TD error."""
    tau: float = 1.0
    """`update_target` mixing: 1 copies the online weights, < 1 is Polyak averaging."""
    epsilon: float = 1.0
    """Initial epsilon of epsilon-greedy exploration; change it with `set_epsilon`."""
    grad_clip: float | None = 10.0
    """Max global gradient norm; None disables clipping."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths after the encoder."""
    num_atoms: int = 1
    """Atoms of C51's return distribution per action (Bellemare et al. 2017); 1 is the
    scalar Q of DQN. With more, the loss is the cross-entropy to the projected n-step
    target distribution (and a row's priority that loss)."""
    v_min: float = -10.0
    """The lowest return of the distribution's support (with ``num_atoms > 1``)."""
    v_max: float = 10.0
    """The highest: the support spans what the discounted return can be."""
    noisy: bool = False
    """Noisy layers after the encoder (Fortunato et al. 2018), exploring by their noise
    in place of epsilon-greedy: ``epsilon`` and its schedule are then not used."""
    sigma0: float = 0.5
    """The noisy layers' initial noise scale (the paper's 0.5)."""
    seed: int | None = None
    """Seed of the initial weights and of exploration; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "n_step": ">= 1",
        "huber_delta": "> 0",
        "tau": "(0, 1]",
        "epsilon": "[0, 1]",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "num_atoms": "[1, 1001]",
        "v_min": "[-1e6, 1e6]",  # returns past a million want rewards scaled down
        "v_max": "[-1e6, 1e6]",
        "sigma0": ">= 0",
        "seed": "[0, 2**63)",
    }
    """Each numeric key's range (None, where a key allows it, is always valid), checked
    by the algorithm configs and by ``hrl_tasks.algorithms.config.check_bounds``."""


@dataclass
class SACPolicyConfig:
    """Config of `SACPolicy`."""

    lr: float = 3e-4
    """Adam learning rate of the actor, the critics and the temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the target critics after each update."""
    n_step: int = 1
    """Rewards summed per target (n-step transitions in replay)."""
    initial_alpha: float = 1.0
    """The entropy temperature at the start."""
    target_entropy: float | None = None
    """The policy entropy the temperature is tuned toward; None: ``-dim(A)`` for Box
    actions, ``0.89 * log(n)`` for Discrete ones (CleanRL's discrete SAC)."""
    tune_alpha: bool = True
    """Tune the temperature; False keeps ``initial_alpha``."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of the actor and of each critic."""
    grad_clip: float | None = None
    """Max global gradient norm; None disables clipping (Stable-Baselines3 does not clip)."""
    normalize_observations: bool = False
    """Standardize observations by running statistics gathered on the rollout workers
    (Stable-Baselines3's ``VecNormalize``), kept in the weights and checkpoints."""
    seed: int | None = None
    """Seed of the initial weights and of exploration; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "tau": "(0, 1]",
        "n_step": ">= 1",
        "initial_alpha": "> 0",
        "target_entropy": "[-10000, 10000]",  # nats: -dim(A) to log(n) in practice
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "seed": "[0, 2**63)",
    }


@dataclass
class TD3PolicyConfig:
    """Config of `TD3Policy`."""

    lr: float = 1e-3
    """Adam learning rate of the actor and the critics."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the targets at each actor update."""
    n_step: int = 1
    """Rewards summed per target (n-step transitions in replay)."""
    policy_delay: int = 2
    """Critic updates per actor update (and per target update)."""
    exploration_noise: float = 0.1
    """Std of the Gaussian added to the actor's action when exploring."""
    target_noise: float = 0.2
    """Std of the smoothing noise on the target actor's action..."""
    target_noise_clip: float = 0.5
    """...clipped to this magnitude."""
    hidden: tuple[int, ...] = (400, 300)
    """Hidden widths of the actor and of each critic."""
    grad_clip: float | None = None
    """Max global gradient norm; None disables clipping."""
    normalize_observations: bool = False
    """Standardize observations by running statistics gathered on the rollout workers
    (Stable-Baselines3's ``VecNormalize``), kept in the weights and checkpoints."""
    seed: int | None = None
    """Seed of the initial weights and of exploration; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "tau": "(0, 1]",
        "n_step": ">= 1",
        "policy_delay": ">= 1",
        "exploration_noise": ">= 0",
        "target_noise": ">= 0",
        "target_noise_clip": ">= 0",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "seed": "[0, 2**63)",
    }


@dataclass
class CQLPolicyConfig(SACPolicyConfig):
    """Config of `CQLPolicy`: SAC's keys and the conservative term's."""

    min_q_weight: float = 5.0
    """Weight of the conservative term (RLlib's and d3rlpy's 5)."""
    num_actions: int = 10
    """Box actions: uniform and policy actions sampled per state for the logsumexp."""
    cql_temperature: float = 1.0
    """Temperature of the logsumexp."""

    BOUNDS: ClassVar[dict[str, str]] = {
        **SACPolicyConfig.BOUNDS,
        "min_q_weight": ">= 0",
        "num_actions": ">= 1",
        "cql_temperature": "> 0",
    }


@dataclass
class IQLPolicyConfig:
    """Config of `IQLPolicy`; the defaults are the IQL paper's for locomotion (Kostrikov
    et al. 2021) and d3rlpy's ``IQLConfig``."""

    lr: float = 3e-4
    """Adam learning rate of the actor, the critics and the value."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the target critics after each update."""
    expectile: float = 0.7
    """The expectile of Q over the recorded actions that V learns: 0.5 is their mean
    (SARSA's value of the data's policy), toward 1 the best of them."""
    beta: float = 3.0
    """Inverse temperature of the actor's weights ``exp(beta * (Q - V))``: 0 imitates every
    recorded action alike (behaviour cloning)."""
    max_weight: float = 100.0
    """The actor's weights are clipped to this."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of the actor, of each critic and of the value."""
    grad_clip: float | None = None
    """Max global gradient norm; None disables clipping."""
    normalize_observations: bool = False
    """Standardize observations by running statistics, kept in the weights and checkpoints."""
    seed: int | None = None
    """Seed of the initial weights and of sampling; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "tau": "(0, 1]",
        "expectile": "(0, 1)",
        "beta": ">= 0",
        "max_weight": "> 0",
        "hidden": ">= 1",
        "grad_clip": "> 0",
        "seed": "[0, 2**63)",
    }


@dataclass
class MARWILPolicyConfig:
    """Config of `MARWILPolicy`; the defaults are RLlib's MARWIL."""

    lr: float = 1e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount of the returns the critic learns."""
    beta: float = 1.0
    """How much the advantage weighs each action: 0 is behaviour cloning."""
    vf_coef: float = 1.0
    """Weight of the value loss (not used when beta is 0)."""
    advantage_norm_update_rate: float = 1e-8
    """Rate of the moving average of squared advantages that scales them."""
    grad_clip: float | None = None
    """Max global gradient norm; None disables clipping."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden widths after the encoder."""
    activation: str = "tanh"
    """Between hidden layers: tanh or relu."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic."""
    seed: int | None = None
    """Seed of the initial weights and of sampling; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "gamma": "[0, 1]",
        "beta": ">= 0",
        "vf_coef": ">= 0",
        "advantage_norm_update_rate": "[0, 1]",
        "grad_clip": "> 0",
        "hidden": ">= 1",
        "seed": "[0, 2**63)",
    }


@dataclass
class ESPolicyConfig:
    """Config of `ESPolicy`; defaults are OpenAI's evolution-strategies-starter's."""

    lr: float = 0.01
    """Adam step size on the flat parameters."""
    noise_stdev: float = 0.02
    """Perturbation scale sigma (used by workers: ``theta + sigma * noise(seed)``)."""
    l2_coeff: float = 0.005
    """L2 weight decay added to the gradient."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden widths after the encoder."""
    grad_clip: float | None = None
    """Max global gradient norm; None disables clipping."""
    seed: int | None = None
    """Seed of the initial weights; None draws one."""

    BOUNDS: ClassVar[dict[str, str]] = {
        "lr": "> 0",
        "noise_stdev": "> 0",
        "l2_coeff": ">= 0",
        "hidden": ">= 1",
        "grad_clip": "> 0",
        "seed": "[0, 2**63)",
    }
    """Each numeric key's range (None, where a key allows it, is always valid), checked
    by the algorithm configs and by ``hrl_tasks.algorithms.config.check_bounds``."""


OLD_NAMES = {
    f"{kind}Config": f"{kind}PolicyConfig"
    for kind in ("APPO", "CQL", "DQN", "ES", "IMPALA", "MARWIL", "PG", "PPO", "SAC", "TD3")
}
"""The policies' configs' names until 2026-12, each then also an algorithm's config."""


def renamed(module: str, name: str, names=tuple(OLD_NAMES)):
    """A module's ``__getattr__`` for the old names in ``names``: the renamed class,
    with a ``DeprecationWarning``; AttributeError for any other name."""
    if name not in names:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = OLD_NAMES[name]
    warnings.warn(
        f"{module}.{name} is now {module}.{new}: {name} is the algorithm's config "
        f"(hrl_tasks.algorithms); the old name goes in a later release",
        DeprecationWarning,
        stacklevel=3,
    )
    return globals()[new]


def __getattr__(name: str):
    return renamed(__name__, name)
