import numpy as np

from hrl_tasks.scheduler.stats import DurationWindow, EngineStats


def test_window_keeps_the_last_values_and_counts_all():
    window = DurationWindow(size=3)
    for value in [10.0, 1.0, 2.0, 3.0]:
        window.add(value)
    assert list(window.values) == [1.0, 2.0, 3.0]
    assert window.count == 4
    assert window.quantile(0.5) == 2.0


def test_summary_quantiles_match_numpy():
    stats = EngineStats()
    values = np.linspace(0.1, 1.0, 10)
    for v in values:
        stats.record_duration("rollout", float(v))
    stats.count("submitted", 10)
    snap = stats.snapshot()
    assert snap["submitted"] == 10 and snap["failed"] == 0
    summary = snap["by_name"]["rollout"]
    assert summary["count"] == 10
    assert np.isclose(summary["p90"], np.quantile(values, 0.9))
    assert np.isclose(summary["mean"], values.mean())


def test_empty_window():
    assert DurationWindow().quantile(0.5) is None
    assert DurationWindow().summary() == {"count": 0, "total_s": 0.0}
