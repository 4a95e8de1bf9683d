"""TD3: twin delayed deep deterministic policy gradient, Box actions."""

from hrl_tasks.algorithms.td3.plan import TD3, TD3Config

__all__ = ["TD3", "TD3Config"]
