"""Facts about the machines and clusters the engine runs on."""

from __future__ import annotations

import os

from distributed import Client

from hrl_tasks.scheduler.errors import EngineError


def count_gpus() -> int:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES, else the NVIDIA driver's list)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def check_versions(client: Client) -> None:
    """Check that the workers can import this package, at this version."""
    import hrl_tasks

    def version():
        try:
            import hrl_tasks as remote

            return remote.__version__
        except ImportError:
            return None

    found = client.run(version)
    wrong = {w: v for w, v in found.items() if v != hrl_tasks.__version__}
    if wrong:
        detail = ", ".join(f"{w}: {v or 'not installed'}" for w, v in sorted(wrong.items()))
        raise EngineError(
            f"hrl_tasks {hrl_tasks.__version__} is needed on every worker, found {detail}. "
            "Install the same version in the workers' environment."
        )
