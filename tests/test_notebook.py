"""The quickstart notebook runs headless, top to bottom, and delivers every change it promises.

Run with nbclient on a kernel spec made for this test that points at this interpreter (the venv,
where the package is installed), so a stray ``python3`` kernel elsewhere on the machine cannot
be picked up. The notebook asserts its own counts; this test also checks the line it prints
and that its outputs are not committed. A cell that hangs fails it after
:data:`CELL_TIMEOUT_SECONDS`; how long the notebook takes is not asserted here (speed belongs
to the benchmarks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_SECONDS = 300
KERNEL = "iggy-spark-tests"


def _kernel_spec(root: Path) -> Path:
    """A kernel spec named :data:`KERNEL` running ``sys.executable``; returns its Jupyter dir."""
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "iggy-spark (tests)",
        "language": "python",
    }))
    return root


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "the notebook has no code cells"
    assert all(not cell.outputs and cell.execution_count is None for cell in code), (
        "strip the notebook's outputs before committing it"
    )


@pytest.mark.e2e
def test_quickstart_runs_headless_and_delivers_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(_kernel_spec(tmp_path / "jupyter")))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_SECONDS, kernel_name=KERNEL,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()

    printed = "".join(
        output.get("text", "")
        for cell in notebook.cells if cell.cell_type == "code"
        for output in cell.outputs if output.output_type == "stream"
    )
    assert sys.executable in printed, "the kernel did not run this interpreter"
    assert "all 330 changes delivered to 4 topics" in printed
    assert "expected:  {'cancelled': 30, 'created': 150, 'paid': 90, 'shipped': 60}" in printed
    plots = [output for cell in notebook.cells if cell.cell_type == "code"
             for output in cell.outputs if "image/png" in output.get("data", {})]
    assert len(plots) == 1, "the messages-per-topic plot was not drawn"
