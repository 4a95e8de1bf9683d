import pytest

from hrl_tasks.scheduler.retry import GiveUp, Retry, RetryPolicy, decide


def test_default_retries_lost_workers_but_not_exceptions():
    policy = RetryPolicy()
    assert isinstance(decide(policy, 0, ValueError(), worker_lost=False), GiveUp)
    assert decide(policy, 2, RuntimeError("killed"), worker_lost=True) == Retry(3, 0.0)
    assert isinstance(decide(policy, 3, RuntimeError("killed"), worker_lost=True), GiveUp)


def test_budget_counts_attempts():
    policy = RetryPolicy(max_retries=2, retry_on=(Exception,))
    assert decide(policy, 0, ValueError(), worker_lost=False) == Retry(1, 0.0)
    assert decide(policy, 1, ValueError(), worker_lost=False) == Retry(2, 0.0)
    assert isinstance(decide(policy, 2, ValueError(), worker_lost=False), GiveUp)


def test_retry_on_filters_exceptions_but_not_lost_workers():
    policy = RetryPolicy(max_retries=3, retry_on=(OSError,))
    assert isinstance(decide(policy, 0, ValueError("x"), worker_lost=False), GiveUp)
    assert decide(policy, 0, ConnectionError(), worker_lost=False) == Retry(1, 0.0)
    assert decide(policy, 0, RuntimeError("killed"), worker_lost=True) == Retry(1, 0.0)


def test_give_up_carries_the_error():
    error = KeyError("k")
    assert decide(RetryPolicy(0, retry_on=(Exception,)), 0, error, False).error is error


def test_exponential_backoff_is_capped():
    policy = RetryPolicy(max_retries=10, backoff=0.5, max_backoff=3.0, retry_on=(Exception,))
    assert [policy.delay(a) for a in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert decide(policy, 2, ValueError(), worker_lost=False) == Retry(3, 2.0)


def test_coerce_and_validation():
    default = RetryPolicy(1)
    assert RetryPolicy.coerce(None, default) is default
    assert RetryPolicy.coerce(4, default) == RetryPolicy(4, retry_on=(Exception,))
    with pytest.raises(TypeError, match="int or a RetryPolicy"):
        RetryPolicy.coerce("3", default)
    with pytest.raises(ValueError):
        RetryPolicy(-1)
    with pytest.raises(TypeError, match="exception types"):
        RetryPolicy(1, retry_on=(42,))
    assert RetryPolicy(1, retry_on=OSError).retry_on == (OSError,)
