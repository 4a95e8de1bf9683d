"""The batching evaluator: concurrent callers share forward passes and get their own rows."""

import threading

import numpy as np
import torch

from hrl_tasks.planning.evaluator import BatchingEvaluator
from hrl_tasks.policies.policy_value import PolicyValueSpec

SPEC = PolicyValueSpec((6, 7, 2), 7, channels=8, blocks=1)


def test_each_caller_gets_the_rows_a_lone_forward_pass_would_give():
    torch.manual_seed(0)
    weights = SPEC.build().get_weights()
    evaluator = BatchingEvaluator(SPEC, weights, version=1)
    reference = SPEC.build()
    reference.set_weights(weights)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 2, size=(n, 6, 7, 2)).astype(np.float32) for n in (1, 3, 8) * 6]
    outputs = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def call(i):
        start.wait()
        outputs[i] = evaluator.predict(inputs[i], None)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for given, (logits, values) in zip(inputs, outputs, strict=True):
        expected_logits, expected_values = reference.predict(given, None)
        np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(values, expected_values, rtol=1e-4, atol=1e-5)
    stats = evaluator.stats()
    assert sum(n * count for n, count in stats["requests"].items()) == len(inputs)
    assert sum(stats["requests"].values()) < len(inputs)  # some passes served several callers
    assert max(stats["rows"]) <= evaluator.max_batch


def test_new_weights_replace_the_old_ones_between_passes():
    torch.manual_seed(0)
    first, second = SPEC.build().get_weights(), SPEC.build().get_weights()
    evaluator = BatchingEvaluator(SPEC, first, version="a")
    observations = np.ones((2, 6, 7, 2), np.float32)
    before = evaluator.predict(observations, None)[1]
    evaluator.load(second, "b")
    assert evaluator.version == "b"
    assert not np.allclose(before, evaluator.predict(observations, None)[1])


def test_the_cache_answers_as_the_network_would_and_forgets_with_new_weights():
    torch.manual_seed(0)
    first, second = SPEC.build().get_weights(), SPEC.build().get_weights()
    cached = BatchingEvaluator(SPEC, first, version="a", cache_size=3)
    plain = BatchingEvaluator(SPEC, first, version="a")
    rng = np.random.default_rng(1)
    positions = rng.integers(0, 2, size=(6, 6, 7, 2)).astype(np.float32)
    batch = positions[[0, 1, 0, 2]]  # a repeat inside one batch is asked of the network once
    for evaluator_input in (batch, positions[[2, 1, 3]]):
        logits, values = cached.predict(evaluator_input, None)
        expected_logits, expected_values = plain.predict(evaluator_input, None)
        np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, expected_values, rtol=1e-5, atol=1e-6)
    stats = cached.stats()
    assert (stats["cache_hits"], stats["cache_misses"]) == (3, 4)  # the repeat; then 2 and 1
    assert len(cached.cache) == 3  # the oldest dropped
    cached.load(second, "b")
    assert not cached.cache
    reference = SPEC.build()
    reference.set_weights(second)
    np.testing.assert_allclose(cached.predict(positions[:1], None)[1],
                               reference.predict(positions[:1], None)[1], rtol=1e-5, atol=1e-6)  # fmt: skip
