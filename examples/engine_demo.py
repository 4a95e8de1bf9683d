"""A tour of the engine: nested fan-out, a stateful worker, a retry, the statistics.

Run it with ``python examples/engine_demo.py``; open the printed dashboard link
while it runs to watch the tasks.
"""

import argparse
import time

import hrl_tasks as hrl


def estimate_pi(seed: int, samples: int) -> float:
    """A leaf task: a Monte-Carlo estimate of pi."""
    import numpy as np

    rng = np.random.default_rng(seed)
    points = rng.random((samples, 2))
    return 4.0 * float(np.mean((points**2).sum(axis=1) <= 1.0))


def fan_out(depth: int, width: int, seed: int, samples: int) -> list[float]:
    """An inner task: submits ``width`` children and waits for them (nested tasks)."""
    if depth == 0:
        return [estimate_pi(seed, samples)]
    engine = hrl.current_engine()
    children = [
        engine.submit(
            fan_out, depth - 1, width, seed * width + i, samples, name=f"level{depth - 1}"
        )
        for i in range(width)
    ]
    return [x for child in engine.gather(children) for x in child]


def flaky(seed: int) -> int:
    """Fails on its first attempt; the retry sees attempt number 1."""
    attempt = hrl.task_context().attempt
    if attempt == 0:
        raise ConnectionError("first attempt fails on purpose")
    return seed * 10 + attempt


class RunningMean:
    """A stateful worker: keeps a running mean across calls."""

    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, values: list[float]) -> float:
        self.total += sum(values)
        self.count += len(values)
        return self.total / self.count

    def get_state(self):
        return (self.total, self.count)

    def restore_state(self, state):
        self.total, self.count = state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--depth", type=int, default=3, help="depth of the nested fan-out")
    parser.add_argument("--width", type=int, default=3, help="children per inner task")
    parser.add_argument("--samples", type=int, default=200_000, help="samples per leaf")
    args = parser.parse_args()

    with hrl.Engine.local(n_workers=args.workers, threads_per_worker=1) as engine:
        print(f"dashboard: {engine.dashboard_link}")
        start = time.perf_counter()
        tree = engine.submit(fan_out, args.depth, args.width, 1, args.samples, name="root")
        mean = engine.create_worker(RunningMean, name="running-mean")
        estimate = mean.call("add", tree)  # the leaves flow worker to worker, not via here
        retried = engine.submit(flaky, 4, retries=1)
        print(f"pi ~ {estimate.result():.5f} from {args.width**args.depth} nested leaves "
              f"in {time.perf_counter() - start:.2f} s")  # fmt: skip
        print(f"flaky task returned {retried.result()} after {retried.attempts} attempts")
        time.sleep(0.2)  # let the last durations arrive
        stats = engine.stats()
        print({k: v for k, v in stats.items() if k != "by_name"})
        for name, summary in stats["by_name"].items():
            print(f"  {name:<22} n={summary['count']:<4} p50={summary.get('p50', 0) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
