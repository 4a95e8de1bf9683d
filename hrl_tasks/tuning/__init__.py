"""Searches run on a cluster: ``hrl_tasks.tune`` and its live table.

The decisions (spaces, samplers, trial schedulers) are in :mod:`hrl_tasks.search`,
which imports neither torch nor a cluster; this package carries them out, every
trial a task that builds its own algorithm (:mod:`hrl_tasks.tuning.runner`).
"""
