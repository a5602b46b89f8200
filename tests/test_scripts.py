"""The README's workbench command, run as CI runs it (root in containers, no browser).

`scripts/workbench.sh` must start JupyterLab on the workbench notebook for any user; as root
JupyterLab refuses to start unless the script passes --allow-root, which is what this pins.
Using the workbench must leave `git status` clean: a save of the tracked notebook with outputs
(what autosave does after a run) writes it as committed, and checkpoints land outside the tree.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "workbench.ipynb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, method: str = "GET", body: dict | None = None) -> dict | None:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def _git_status(*paths: str) -> str:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--", *paths], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _with_outputs(notebook: dict) -> dict:
    """The notebook as JupyterLab saves it after running the workbench cell: outputs, counts,
    widget state, the kernel's language_info and run metadata."""
    nb = copy.deepcopy(notebook)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["execution_count"] = 3
            cell["outputs"] = [
                {
                    "output_type": "display_data",
                    "data": {"text/plain": ["Workbench(...)"]},
                    "metadata": {},
                }
            ]
            cell["metadata"] = {"execution": {"iopub.status.idle": "2026-01-01T00:00:00Z"}, "scrolled": True}
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    return nb


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_workbench_script_serves_the_workbench_notebook_and_keeps_the_repo_clean(tmp_path):
    port = _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    base = f"http://127.0.0.1:{port}/api/contents"
    original = NOTEBOOK.read_bytes()
    assert _git_status("notebooks") == "", "notebooks/ must start clean"
    scratch = f"scratch-{uuid.uuid4().hex[:8]}.ipynb"  # a user's own notebook: untracked
    log_path = tmp_path / "workbench.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["bash", "scripts/workbench.sh", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--port-retries=0", "--IdentityProvider.token=", "--ServerApp.password=",
             "--ServerApp.disable_check_xsrf=True"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"workbench.sh exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    notebook = _request(f"{base}/workbench.ipynb")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"no answer within 240 s:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.5)
            assert notebook["name"] == "workbench.ipynb"
            assert "Workbench" in json.dumps(notebook["content"])
            # the server was started on the notebook itself, as the README says
            assert "workbench.ipynb" in log_path.read_text()

            # What autosave does after the cell ran: a checkpoint, then a save with outputs.
            _request(f"{base}/workbench.ipynb/checkpoints", "POST")
            dirty = _with_outputs(notebook["content"])
            _request(f"{base}/workbench.ipynb", "PUT", {"type": "notebook", "format": "json", "content": dirty})
            on_disk = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
            assert all(not c.get("outputs") and c.get("execution_count") is None for c in on_disk["cells"])
            assert "widgets" not in on_disk["metadata"] and on_disk["metadata"]["language_info"] == {"name": "python"}
            assert NOTEBOOK.read_bytes() == original  # byte for byte as committed
            assert _git_status("notebooks", ".gitignore") == ""  # nothing modified, untracked or ignored
            assert not list(REPO.rglob(".ipynb_checkpoints")), "checkpoints must stay out of the tree"
            mirrored = (
                tmp_path / "cache" / "cfgzip_lab" / "ipynb_checkpoints" / str(NOTEBOOK.parent.resolve()).lstrip("/")
            )
            assert list(mirrored.glob("workbench-*.ipynb")), "one checkpoint folder per notebook folder"

            # A user's own notebook keeps its outputs: only tracked notebooks are stripped.
            _request(f"{base}/{scratch}", "PUT", {"type": "notebook", "format": "json", "content": dirty})
            mine = json.loads((NOTEBOOK.parent / scratch).read_text(encoding="utf-8"))
            assert any(c.get("outputs") for c in mine["cells"])
        finally:
            if NOTEBOOK.read_bytes() != original:  # never leave the shared tree dirty, even on failure
                NOTEBOOK.write_bytes(original)
            (NOTEBOOK.parent / scratch).unlink(missing_ok=True)
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
