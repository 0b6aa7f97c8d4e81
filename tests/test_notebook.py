"""examples/notebook.ipynb runs from top to bottom in a fresh kernel, showing what it says it shows."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "examples" / "notebook.ipynb"


def test_the_example_notebook_runs_and_shows_the_report_a_plot_and_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "the notebook is kept without outputs"

    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(page.startswith("<iframe srcdoc=") for page in html)  # the report, inline
    assert any("avg_jct_s_ci95" in table for table in html)  # the sweep's means as a DataFrame
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot
    assert "rate must be positive, got 0" in "".join(o.get("text", "") for o in outputs)
    assert not [o for o in outputs if o["output_type"] == "error"]
