"""The grammars and sample documents shipped inside the package.

They are package data (``cfgzip_lab/grammars/NAME.ebnf`` and
``cfgzip_lab/grammars/samples/NAME/*.txt``, declared in ``pyproject.toml``) and are found
through :mod:`importlib.resources`, so an installed wheel knows ``json`` or ``c_like`` as well
as a checkout does; nothing looks for a ``grammars/`` folder beside the package.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["bundled_dir", "bundled_grammars", "bundled_samples"]


def bundled_dir() -> Path:
    """The folder of the bundled grammars inside the installed package.

    Raises
    ------
    RuntimeError
        When the package is imported from a zip archive: the grammars are read as files.
    """
    root = files("cfgzip_lab") / "grammars"
    if not isinstance(root, Path):  # a wheel installs as plain files; only zipimport lands here
        raise RuntimeError(
            f"cfgzip_lab's bundled grammars are not plain files ({root!r}); install the package unzipped"
        )
    return root


def bundled_grammars() -> dict[str, Path]:
    """Name → path of every bundled grammar, sorted by name (``{"arithmetic_left_recursive": ..., "json": ...}``)."""
    return {p.stem: p for p in sorted(bundled_dir().glob("*.ebnf"))}


def bundled_samples(name: str | Path) -> list[Path]:
    """The sample documents of the bundled grammar ``name`` (a name or a path whose stem is one), sorted.

    A grammar without samples (or one that is not bundled) has none: ``[]``.
    """
    folder = bundled_dir() / "samples" / Path(name).stem
    return sorted(folder.glob("*.txt")) if folder.is_dir() else []
