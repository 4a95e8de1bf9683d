"""`tune`'s options: every name it takes, and a clear error for one it does not."""

import dataclasses

import pytest

import hrl_tasks
from hrl_tasks.tuning.options import TuneOptions


def test_options_are_read_from_keywords_with_their_defaults():
    opts = TuneOptions.from_keywords({"num_samples": 3, "scheduler": "asha"})
    assert (opts.num_samples, opts.scheduler, opts.sampler, opts.verbose) == (
        3,
        "asha",
        "random",
        True,
    )


def test_an_unknown_option_is_refused_before_anything_starts_naming_the_options():
    with pytest.raises(TypeError, match=r"\['num_sample'\].*num_samples, scheduler"):
        hrl_tasks.tune("ppo", "CartPole-v1", num_sample=3)
    names = {f.name for f in dataclasses.fields(TuneOptions)}
    assert {"stop", "out", "resume", "trial_resources", "reporter"} <= names
