"""The replay rate limiter: pure counting, and the blocking form two threads share."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.data.rate_limiter import BlockingLimiter, RateLimiterError, SampleToInsertRatio


def test_nothing_is_sampled_before_min_size_and_inserts_are_never_refused_before_it():
    ratio = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=100, error_buffer=10)
    for _ in range(9):
        assert ratio.can_insert(10) and not ratio.can_sample(1)
        ratio.insert(10)
    assert ratio.batches_allowed(8) == 0
    ratio.insert(10)  # 100 rows: sampling may start, within the buffer's slack
    assert ratio.can_sample(8) and ratio.batches_allowed(8) == 1  # 10 rows of slack


def test_a_synchronous_loop_replays_the_ratio_it_was_given():
    # 32-row rounds, 64-row batches, 3 replayed rows per inserted one (a fractional
    # count of batches per round: 1.5), after 320 rows.
    ratio = SampleToInsertRatio.for_batches(3.0, 320, sample_rows=64, insert_rows=32)
    for _ in range(200):
        ratio.insert(32)
        for _ in range(ratio.batches_allowed(64)):
            ratio.sample(64)
    expected = 3.0 * (ratio.inserted - 320)
    assert abs(ratio.sampled - expected) <= ratio.error_buffer


@settings(max_examples=200, deadline=None)
@given(
    spi=st.floats(0.05, 64.0),
    sample_rows=st.integers(1, 512),
    insert_rows=st.integers(1, 256),
    min_size=st.integers(0, 2000),
    moves=st.lists(st.booleans(), min_size=1, max_size=300),
)
def test_the_counts_stay_within_the_buffer_and_one_side_can_always_go_on(
    spi, sample_rows, insert_rows, min_size, moves
):
    ratio = SampleToInsertRatio.for_batches(spi, min_size, sample_rows, insert_rows)
    ratio.check_can_progress(sample_rows, insert_rows)
    for wants_sample in moves:
        can_sample, can_insert = ratio.can_sample(sample_rows), ratio.can_insert(insert_rows)
        assert can_sample or can_insert  # never both blocked
        if wants_sample and can_sample or not can_insert:
            ratio.sample(sample_rows)
        else:
            ratio.insert(insert_rows)
        if ratio.inserted >= min_size:
            assert ratio.center - ratio.error_buffer <= ratio.diff
            assert ratio.diff <= ratio.center + ratio.error_buffer + spi * insert_rows


def test_a_buffer_too_small_to_progress_is_refused_with_the_size_it_needs():
    ratio = SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=0, error_buffer=10)
    with pytest.raises(RateLimiterError, match="at least 48"):
        ratio.check_can_progress(sample_rows=64, insert_rows=16)
    with pytest.raises(RateLimiterError, match="samples_per_insert must be > 0"):
        SampleToInsertRatio(0.0, 0, 1)


def test_the_state_round_trips():
    ratio = SampleToInsertRatio(1.0, 10, 64)
    ratio.insert(100)
    ratio.sample(64)
    other = SampleToInsertRatio(1.0, 10, 64)
    other.restore(ratio.state())
    assert (other.inserted, other.sampled, other.diff) == (100, 64, ratio.diff)


def test_a_fast_sampler_waits_for_the_learner_and_the_ratio_holds():
    # The inserting thread would run far ahead; the limiter holds it to 2 sampled rows
    # per inserted row (a learner that takes 16 rows at a time).
    limiter = BlockingLimiter(SampleToInsertRatio.for_batches(2.0, 32, 16, 8))
    learned = []

    def learner():
        while limiter.wait_to_sample(16, timeout=5):
            learned.append(16)
            if sum(learned) >= 4000:
                limiter.stop.set()
                limiter.wake()

    thread = threading.Thread(target=learner)
    thread.start()
    while limiter.wait_to_insert(8, timeout=5):
        pass
    thread.join(10)
    assert not thread.is_alive()
    ratio = limiter.ratio
    assert abs(ratio.sampled - 2.0 * (ratio.inserted - 32)) <= ratio.error_buffer + 16
    assert ratio.inserted < 2200  # not 10x ahead: it waited


def test_a_waiter_returns_false_when_stopped():
    limiter = BlockingLimiter(SampleToInsertRatio(1.0, 100, 8))
    threading.Timer(0.1, lambda: (limiter.stop.set(), limiter.wake())).start()
    assert limiter.wait_to_sample(8, timeout=5) is False
