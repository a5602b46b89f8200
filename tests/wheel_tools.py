"""Building the wheel of the working tree and installing it into venvs, offline.

Shared by ``test_wheel.py`` (the full install) and ``test_core_install.py`` (the core alone).
Nothing here reaches the network: the wheel is built with ``--no-build-isolation`` from the test
venv's setuptools, and venvs get their dependencies from the test venv, never from an index.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
ENV.pop("PYTHONPATH", None)

__all__ = ["ENV", "REPO", "build_wheel", "core_closure", "link_distributions", "make_venv", "run", "wheel_requirements"]


def run(*args, cwd: Path, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc


def build_wheel(tmp: Path) -> Path:
    """The wheel of the working tree, built from a copy (build/ and egg-info stay out of the tree)."""
    src = tmp / "src"
    src.mkdir()
    shutil.copy2(REPO / "pyproject.toml", src)
    shutil.copy2(REPO / "README.md", src)
    shutil.copytree(
        REPO / "cfgzip_lab", src / "cfgzip_lab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    )
    dist = tmp / "dist"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        dist,
        src,
        cwd=tmp,
    )
    (wheel,) = dist.glob("cfgzip_lab-*.whl")
    return wheel


def make_venv(where: Path) -> tuple[Path, Path]:
    """An empty venv (no pip, no system site-packages); returns its python and its site-packages."""
    run(sys.executable, "-m", "venv", "--without-pip", where, cwd=where.parent)
    python = where / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=where.parent)
    return python, Path(site.stdout.strip())


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines without an extra: what ``pip install`` of it pulls in."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def core_closure(requirements: list[str]) -> dict[str, metadata.Distribution]:
    """The test venv's distributions that ``requirements`` (no extras) need, transitively.

    Markers are evaluated for this interpreter with no extra selected, as pip would.
    """
    found: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in found:
            continue
        found[key] = metadata.distribution(req.name)  # PackageNotFoundError: the test venv lacks it
        todo += [Requirement(r) for r in found[key].requires or ()]
    return found


def link_distributions(dists: dict[str, metadata.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level files (its packages, modules, ``.dist-info``) into ``into``.

    The result is a site folder holding those distributions and nothing else, without a copy.
    """
    into.mkdir(parents=True, exist_ok=True)
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files or ()}:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue  # scripts in bin/, byte code, start-up hooks (they would not run from here)
            link = into / top
            if not link.exists() and (base / top).exists():
                link.symlink_to(base / top)
