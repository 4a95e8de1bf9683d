"""Errors that any layer may raise about what the user asked for.

This module imports nothing of hrl_tasks, so the lowest layer can raise these and
the highest can catch them.
"""


class ConfigError(ValueError):
    """A config key that does not exist, or a value of the wrong type or out of range."""
