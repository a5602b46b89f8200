"""Drafts: what was typed into a workbench, kept on disk per notebook, so a kernel restart or
crash loses nothing.

One draft per notebook path: JupyterLab tells a kernel which notebook it serves
(``JPY_SESSION_NAME``, the notebook's absolute path; ipykernel also sets ``__session__``), and
the draft of ``/home/me/clone-a/notebooks/workbench.ipynb`` is another file than the draft of
``/home/me/clone-b/notebooks/workbench.ipynb``. A kernel started some other way (nbclient,
a script) keys its draft by its working folder instead.

A draft file is JSON: the text, how it was read (``auto``, ``ebnf``, ``gbnf``,
``json_schema``), when it was saved and for which notebook. A path that does not end in
``.json`` (an older workbench's ``workbench_draft.ebnf``, or one a caller picked) holds the
bare text. Writing one never fails a check: a draft is a convenience.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..vocab_sources import vocab_cache_dir

__all__ = ["Draft", "notebook_key", "draft_path_for", "read_draft", "write_draft"]


@dataclass(frozen=True)
class Draft:
    """A draft read back: its text, input kind, when it was written (epoch seconds), for what."""

    text: str
    kind: str = "auto"
    saved_at: float = 0.0
    notebook: str = ""

    def describe(self) -> str:
        """``"41 lines, saved 2024-05-01 12:03"``: what the Restore button's hint says."""
        lines = self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved_at)) if self.saved_at else "at an unknown time"
        return f"{lines:,} line{'s' * (lines != 1)}, saved {when}"


def notebook_key() -> str:
    """The notebook this kernel serves (its absolute path), else ``"cwd:<working folder>"``."""
    path = os.environ.get("JPY_SESSION_NAME")
    if not path:
        try:  # ipykernel sets it in the user namespace too (it is the same value)
            from IPython import get_ipython

            shell = get_ipython()
            path = shell.user_ns.get("__session__") if shell is not None else None
        except ImportError:
            path = None
    return str(Path(path).expanduser().resolve()) if path else f"cwd:{Path.cwd().resolve()}"


def draft_path_for(key: str | None = None, folder: Path | None = None) -> Path:
    """``~/.cache/cfgzip_lab/drafts/<notebook stem>-<hash of its path>.json`` for ``key``
    (default: :func:`notebook_key`); ``$CFGZIP_CACHE`` moves the folder."""
    key = key or notebook_key()
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(key.removeprefix("cwd:")).stem or "workbench")[:40]
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return (folder or vocab_cache_dir() / "drafts") / f"{stem}-{digest}.json"


def write_draft(path: Path, text: str, *, kind: str = "auto", notebook: str = "") -> bool:
    """Write ``text`` as the draft at ``path`` (atomically: a crash mid-write keeps the old
    draft); False if it could not be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            data = json.dumps({"text": text, "kind": kind, "saved_at": time.time(), "notebook": notebook})
        else:
            data = text
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def read_draft(path: Path | None) -> Draft | None:
    """The draft at ``path``, or None when there is none (or it cannot be read)."""
    if path is None or not path.is_file():
        return None
    try:
        raw = path.read_text(encoding="utf-8")
        saved_at = path.stat().st_mtime
    except (OSError, UnicodeDecodeError):
        return None
    if path.suffix != ".json":
        return Draft(raw, "auto", saved_at)
    try:
        data = json.loads(raw)
        return Draft(
            str(data["text"]),
            str(data.get("kind", "auto")),
            float(data.get("saved_at", saved_at)),
            str(data.get("notebook", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
