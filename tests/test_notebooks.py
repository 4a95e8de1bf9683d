"""The example notebooks, run top to bottom in a real Jupyter kernel on a short budget.

Each notebook's cell tagged ``parameters`` holds its budget; the test replaces it
with a short one (as papermill would) and checks what the notebook shows.
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip(
    "nbformat", reason="needs the notebook extra: pip install -e .[test]"
)
nbclient = pytest.importorskip(
    "nbclient", reason="needs the notebook extra: pip install -e .[test]"
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY_PPO = ('{"num_workers": 1, "num_envs_per_worker": 2, "rollout_fragment_length": 32, '
            '"train_batch_size": 64, "minibatch_size": 32}')  # fmt: skip
SHORT = {
    "quickstart": "stop_reward = 450\nmax_iterations = 3",
    "search": f"num_samples = 2\nmax_iterations = 2\nstop_reward = 450\nconfig = {TINY_PPO}",
    "planning": (
        'iterations = 1\nopponent = "minimax"\nconfig = {"games_per_iteration": 2, '
        '"simulations": 16, "evaluation_interval": 1, "evaluation_games": 2, '
        '"updates_per_iteration": 2, "min_buffer_size": 8, "num_workers": 1}\n'
        f'connect4_checkpoint = "{EXAMPLES / "checkpoints" / "connect4.hrl"}"\n'
        'connect4_opponent = "random"\nconnect4_simulations = 50'
    ),
}
SHOWS = {
    "quickstart": ["iteration 3: mean return", "episode return:", "image/png"],
    "search": ["2 trials:", "best config:", "image/png"],
    "planning": ["win_rate/random", "player_1 plays", "rewards:", "connect four rewards:"],
}


def run_notebook(name: str, cwd: Path) -> str:
    """Execute ``examples/<name>.ipynb`` with its short budget; returns its outputs as text."""
    notebook = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
    (parameters,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    parameters.source = SHORT[name]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})  # fmt: skip
    client.execute()
    shown = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            shown.append(output.get("text", ""))
            shown.extend(str(k) for k in output.get("data", {}))
            shown.extend(str(v) for v in output.get("data", {}).values())
    return "\n".join(shown)


@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(SHORT))
def test_the_example_notebook_runs_in_a_kernel(name, tmp_path, monkeypatch):
    # A headless machine often names a backend (CI's Agg): a notebook's plot shows anyway.
    monkeypatch.setenv("MPLBACKEND", "Agg")
    shown = run_notebook(name, tmp_path)
    for expected in SHOWS[name]:
        assert expected in shown, f"{name}.ipynb did not show {expected!r}:\n{shown[-3000:]}"


def test_every_example_notebook_has_a_budget_cell_and_no_outputs():
    names = sorted(p.stem for p in EXAMPLES.glob("*.ipynb"))
    assert names == sorted(SHORT)
    for name in names:
        notebook = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
        tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{name}.ipynb needs one cell tagged 'parameters'"
        assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
