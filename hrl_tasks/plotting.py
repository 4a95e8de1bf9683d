"""Learning curves as PNG files (matplotlib, headless), drawn in this process or by a
`CurveProcess` of their own (``python -m hrl_tasks.plotting``)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def read_metrics(path: str | Path) -> list[dict]:
    """The metrics dicts of a ``metrics.jsonl`` file, in order."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curve(
    runs: dict[str, Sequence[dict]],
    path: str | Path,
    title: str = "",
    threshold: float | None = None,
) -> Path:
    """Mean episode return against env steps, one line per run; written to ``path``.

    Args:
        runs: label -> metrics dicts (each with ``env_steps_sampled`` and
            ``episode_return_mean``; multi-agent runs' ``policy_return_mean/<id>``
            are drawn dotted, one line per policy).
        path: the PNG to write.
        title: the plot's title.
        threshold: draw the target return as a dashed line.
    """
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for label, metrics in runs.items():
        per_policy = sorted({k for m in metrics for k in m if k.startswith("policy_return_mean/")})
        for key in ["episode_return_mean", *per_policy]:
            points = [  # no episode finished yet: NaN in memory, null in metrics.jsonl
                (m["env_steps_sampled"], m[key])
                for m in metrics
                if m.get(key) is not None and not math.isnan(m[key])
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                policy = key.partition("/")[2]
                ax.plot(
                    xs,
                    ys,
                    label=f"{label}: {policy}" if policy else label,
                    linestyle=":" if policy else "-",
                )
    if threshold is not None:
        ax.axhline(threshold, linestyle="--", color="grey", label=f"target {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return (recent episodes)")
    return save_figure(fig, ax, path, title)


def plot_win_rates(metrics: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """Win rate (solid) and loss rate (dashed) against each evaluation opponent over
    training time; written to ``path``.

    Args:
        metrics: metrics dicts with ``time_total_s`` and ``win_rate/<opponent>`` keys.
            Iterations without an evaluation repeat the last one; each evaluation is
            drawn once, where the ``evaluations`` count grows (without that key,
            where the rates change).
        path: the PNG to write.
        title: the plot's title.
    """
    plt = pyplot()

    opponents = sorted(
        {k.partition("/")[2] for m in metrics for k in m if k.startswith("win_rate/")}
    )
    fig, ax = plt.subplots(figsize=(8.5, 4), dpi=110)
    for opponent in opponents:
        points = evaluation_points(metrics, opponent)
        if points:
            xs, wins, losses = zip(*points, strict=True)
            (line,) = ax.plot(xs, wins, marker=".", label=f"{opponent}: won")
            if all(x is not None for x in losses):
                ax.plot(
                    xs,
                    losses,
                    marker=".",
                    linestyle="--",
                    color=line.get_color(),
                    label=f"{opponent}: lost",
                )
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel("share of evaluation games")
    return save_figure(fig, ax, path, title, legend_outside=True)


def evaluation_points(metrics: Sequence[dict], opponent: str) -> list[tuple]:
    """``(minutes, win rate, loss rate)`` of each evaluation against ``opponent``, once
    each: where the ``evaluations`` count grows, or without it where the rates change."""
    points, last = [], None
    for m in metrics:
        value = (m.get(f"win_rate/{opponent}"), m.get(f"loss_rate/{opponent}"))
        seen = m.get("evaluations", value)
        if value[0] is not None and seen != last:
            points.append((m["time_total_s"] / 60, *value))
            last = seen
    return points


def save_figure(fig, ax, path: str | Path, title: str, legend_outside: bool = False) -> Path:
    """Title, grid and legend on ``ax`` (right of the axes with ``legend_outside``, for
    curves that fill the whole height); ``fig`` written to ``path`` and closed."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        if legend_outside:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        else:
            ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_run(
    metrics_path: str | Path,
    path: str | Path,
    label: str,
    title: str = "",
    threshold: float | None = None,
) -> Path:
    """The curve of the run whose metrics are in ``metrics_path`` (a ``metrics.jsonl``),
    written to ``path``: win rates when its last line has them (games), else the mean
    return against env steps (`plot_learning_curve`, the run as ``label``)."""
    metrics = read_metrics(metrics_path)
    if metrics and any(key.startswith("win_rate/") for key in metrics[-1]):
        return plot_win_rates(metrics, path, title=title)
    return plot_learning_curve({label: metrics}, path, title=title, threshold=threshold)


class CurveProcess:
    """A process of its own that imports matplotlib as soon as it starts and draws one
    run's curve (`plot_run`) when asked, so that the run's own process never imports
    matplotlib: in a one-iteration ``hrl-tasks train``, that import was a fifth of the
    driver's CPU, and the driver is the busiest process. Usage::

        curve = CurveProcess()
        curve.start()  # early: it imports while the run goes on
        ...
        curve.draw("runs/x/metrics.jsonl", "runs/x/learning_curve.png", "ppo", "PPO")

    If the process fails, `draw` draws in this process instead."""

    TIMEOUT_S = 60.0

    def __init__(self):
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the process, if not yet started."""
        if self.process is None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hrl_tasks.plotting"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )

    def draw(
        self,
        metrics_path: str | Path,
        path: str | Path,
        label: str,
        title: str = "",
        threshold: float | None = None,
    ) -> Path:
        """`plot_run` with these arguments, by the process (started now if it was not);
        returns ``path``."""
        request = {
            "metrics_path": str(metrics_path),
            "path": str(path),
            "label": label,
            "title": title,
            "threshold": threshold,
        }
        self.start()
        try:
            self.process.communicate(json.dumps(request) + "\n", timeout=self.TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.close()
        if self.process.returncode != 0:
            return plot_run(metrics_path, path, label, title, threshold)
        return Path(path)

    def close(self) -> None:
        """End the process if it still runs (a run that ends without its curve)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":  # a CurveProcess: import, then draw what stdin's line asks
    pyplot()
    line = sys.stdin.readline()
    if line.strip():
        plot_run(**json.loads(line))
