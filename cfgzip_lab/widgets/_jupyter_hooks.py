"""A Jupyter server pre-save hook that keeps the repository's tracked notebooks clean.

``scripts/workbench.sh`` starts JupyterLab with
``--FileContentsManager.pre_save_hook=cfgzip_lab.widgets._jupyter_hooks.strip_tracked_notebook``.
Every save of a notebook that git tracks (the workbench and the tours) — autosave every two
minutes, Ctrl-S, "save with widget state" — then writes the notebook as committed: no outputs,
no execution counts, no widget state, no per-cell run metadata, ``language_info`` reduced to
its name (the kernel fills in its version). Edits to the cells' source are saved as usual.

Why a server-side hook rather than switching autosave off in the browser: it holds for every
way a save can happen (autosave, a keyboard shortcut, a menu, another front end or API client),
and it leaves autosave on for the user's own, untracked notebooks.
"""

from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

__all__ = ["strip_tracked_notebook", "strip_notebook", "is_tracked"]


def strip_notebook(content: dict) -> dict:
    """Reduce a notebook (nbformat 4 JSON, as a dict) to what the repository commits; in place."""
    for cell in content.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.get("metadata") or {}
        cell["metadata"] = {k: v for k, v in meta.items() if k == "tags"}
    meta = content.get("metadata") or {}
    kept = {}
    if "kernelspec" in meta:
        kept["kernelspec"] = meta["kernelspec"]
    language = meta.get("language_info") or {}
    if "name" in language:
        kept["language_info"] = {"name": language["name"]}
    content["metadata"] = kept
    return content


@lru_cache(maxsize=256)
def is_tracked(os_path: str) -> bool:
    """Whether git tracks the file (False outside a git checkout or without git)."""
    path = Path(os_path)
    try:
        done = subprocess.run(
            ["git", "ls-files", "--error-unmatch", path.name],
            cwd=path.parent,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def strip_tracked_notebook(model: dict, path: str, contents_manager, **_kwargs) -> None:
    """``ContentsManager.pre_save_hook``: strip a tracked notebook before it is written."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    os_path = contents_manager._get_os_path(path)
    if is_tracked(str(os_path)):
        strip_notebook(model["content"])
