"""The README's workbench command, run as CI runs it (root in containers, no browser).

`scripts/workbench.sh` must start JupyterLab on the workbench notebook for any user; as root
JupyterLab refuses to start unless the script passes --allow-root, which is what this pins.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_workbench_script_serves_the_workbench_notebook(tmp_path):
    port = _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
    )
    log_path = tmp_path / "workbench.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["bash", "scripts/workbench.sh", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--port-retries=0", "--IdentityProvider.token=", "--ServerApp.password="],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"workbench.sh exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/contents/workbench.ipynb", timeout=5
                    ) as r:
                        notebook = json.load(r)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"no answer within 240 s:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.5)
            assert notebook["name"] == "workbench.ipynb"
            assert "Workbench" in json.dumps(notebook["content"])
            # the server was started on the notebook itself, as the README says
            assert "workbench.ipynb" in log_path.read_text()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
