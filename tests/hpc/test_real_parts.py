"""A real part (SLURM, the Dask Gateway, MPI) that cannot run fails its tests under CI
and skips them elsewhere."""

import pytest

from tests.conftest import require_real_part


def test_a_missing_real_part_fails_under_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI runs SLURM .*, but no sbatch here"):
        require_real_part("SLURM", "no sbatch here")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="SLURM: no sbatch here"):
        require_real_part("SLURM", "no sbatch here")
    monkeypatch.setenv("CI", "true")
    require_real_part("SLURM", None)  # nothing missing: the test goes on
