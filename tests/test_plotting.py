"""Which iterations the win-rate curve draws, and that both curves are written."""

from hrl_tasks.plotting import evaluation_points, plot_win_rates


def evaluated_every(k: int, rates: list[float], iterations: int) -> list[dict]:
    """Metrics as AlphaZero reports them: each iteration repeats the last evaluation."""
    metrics, last = [], {}
    for i in range(1, iterations + 1):
        if i % k == 0:
            rate = rates[i // k - 1]
            last = {"win_rate/random": rate, "loss_rate/random": 1 - rate, "evaluations": i // k}
        metrics.append({"iteration": i, "time_total_s": 60.0 * i, **last})
    return metrics


def test_an_evaluation_is_drawn_once_even_when_its_rates_repeat():
    metrics = evaluated_every(3, [1.0, 1.0, 0.5, 1.0], iterations=13)
    points = evaluation_points(metrics, "random")
    assert [p[0] for p in points] == [3.0, 6.0, 9.0, 12.0]
    assert [p[1] for p in points] == [1.0, 1.0, 0.5, 1.0]


def test_without_a_count_changes_of_the_rates_tell_evaluations():
    metrics = evaluated_every(2, [0.5, 0.5, 0.75], iterations=6)
    for m in metrics:
        m.pop("evaluations", None)
    assert [p[0] for p in evaluation_points(metrics, "random")] == [2.0, 6.0]
    assert evaluation_points(metrics, "minimax") == []


def test_the_win_rate_plot_is_written(tmp_path):
    path = plot_win_rates(evaluated_every(2, [0.2, 0.6, 0.9], 6), tmp_path / "w.png", "t")
    assert path.stat().st_size > 1000
