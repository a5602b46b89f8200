"""Every notebook under notebooks/ runs top to bottom (nbclient), and is committed clean:
no outputs, no execution counts, no saved widget state."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_notebooks_exist():
    names = {p.name for p in ALL}
    assert {
        "workbench.ipynb",
        "tour_authoring.ipynb",
        "tour_classes.ipynb",
        "tour_decoding.ipynb",
        "tour_benchmarks.ipynb",
        "tour_tools.ipynb",
    } <= names


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_notebook_is_committed_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in nb.get("metadata", {}), "saved widget state (several MB per FigureWidget)"
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"outputs saved in {path.name}"
            assert cell.get("execution_count") is None


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_notebook_runs(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # Run a copy in a scratch folder: whatever a notebook writes lands there.
    work = tmp_path / path.name
    shutil.copy(path, work)
    nb = nbformat.read(work, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )  # jupyter_client starts a kernelspec's "python" as sys.executable: the .venv's
    started = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - started
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    print(f"{path.name}: {seconds:.1f} s")
