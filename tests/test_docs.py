"""The documentation site: ``mkdocs build --strict`` (warnings are errors), and every Python code
block of its pages and of the README runs.

The blocks run in one fresh interpreter per page, from a temporary folder, offline; a page's blocks
share one namespace, in order, as a reader would paste them. ``NOT_RUN`` lists the blocks that do
not run on their own and why (each is covered elsewhere)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ENV_OFFLINE = {"HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}
PAGES = sorted(p.relative_to(REPO) for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")])
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = {
    # page: why its blocks are not run here
    "docs/reference/workbench-guide.md": "the Export tab's snippet reads files an export wrote "
    "(test_widgets.py runs the snippet usage_snippet writes)",
}


def _env() -> dict:
    import os

    return {**os.environ, **ENV_OFFLINE}


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the [docs] extra (requirements-test.txt) builds the site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "matcher_for" in api and "Parameters" in api  # the API reference came from the docstrings
    assert (tmp_path / "site" / "tutorials" / "tour_authoring" / "index.html").is_file()  # a tour rendered


def test_every_page_with_python_is_listed():
    assert all(Path(page) in PAGES for page in NOT_RUN)
    assert [p for p in PAGES if PYTHON_BLOCK.search((REPO / p).read_text(encoding="utf-8"))], "no blocks found"


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if str(p) not in NOT_RUN and PYTHON_BLOCK.search((REPO / p).read_text(encoding="utf-8"))],
    ids=str,
)
def test_python_blocks_of_the_page_run(page, tmp_path):
    code = "\n".join(block for block in PYTHON_BLOCK.findall((REPO / page).read_text(encoding="utf-8")))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{page}:\n{proc.stderr[-4000:]}"
