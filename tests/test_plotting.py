"""Which iterations the win-rate curve draws, and that both curves are written."""

import json
import subprocess
import sys

from hrl_tasks.plotting import CurveProcess, evaluation_points, plot_win_rates


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


def write_metrics(path, metrics: list[dict]) -> None:
    path.write_text("".join(json.dumps(m) + "\n" for m in metrics))


def test_a_curve_process_draws_the_run_and_this_process_imports_no_matplotlib(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [{"env_steps_sampled": 512 * i, "episode_return_mean": 20.0 * i}
                            for i in range(1, 5)])  # fmt: skip
    code = (
        "import sys; from hrl_tasks.plotting import CurveProcess; "
        f"curve = CurveProcess(); curve.start(); curve.draw({str(metrics)!r}, {str(tmp_path / 'c.png')!r}, "
        "'ppo', 'ppo on CartPole-v1', 450.0); "
        "print(curve.process.returncode, 'matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "False"], done.stderr
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_curve_process_draws_win_rates_when_the_last_line_has_them(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, evaluated_every(2, [0.2, 0.6, 0.9], 6))
    curve = CurveProcess()
    assert curve.draw(metrics, tmp_path / "w.png", "alphazero") == tmp_path / "w.png"
    assert curve.process.returncode == 0 and (tmp_path / "w.png").stat().st_size > 1000


def test_if_the_curve_process_died_the_curve_is_drawn_here(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [{"env_steps_sampled": 100, "episode_return_mean": 9.0}])
    curve = CurveProcess()
    curve.start()
    curve.process.kill()
    curve.process.wait()
    assert curve.draw(metrics, tmp_path / "c.png", "ppo").stat().st_size > 1000
    assert curve.process.returncode != 0


def test_closing_an_unused_curve_process_ends_it():
    CurveProcess().close()  # never started
    curve = CurveProcess()
    curve.start()
    curve.close()
    assert curve.process.poll() is not None
    curve.close()  # twice is fine
