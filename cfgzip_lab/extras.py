"""The optional parts of cfgzip_lab and the one check every one of them makes before importing.

``pip install cfgzip-lab`` installs the core: compile a grammar, class a vocabulary, the native,
plain and compressed engines, :func:`cfgzip_lab.matcher_for`, the serving plugins and the CLI's
``gnf``/``test``/``compress``/``verify``/``bench`` commands. It needs numpy, xgrammar (with what
xgrammar needs: torch, transformers, ...) and tokenizers. The rest is an extra::

    pip install "cfgzip-lab[workbench]"   # JupyterLab workbench, widgets, plotly, railroad diagrams
    pip install "cfgzip-lab[hf]"          # generation and model loading with transformers
    pip install "cfgzip-lab[gguf]"        # tokenizers and models read from GGUF files

A module that needs an extra calls :func:`require_extra` before its first import of it, so a
missing extra is one :class:`MissingExtraError` naming the extra and the pip command, never a
``ModuleNotFoundError`` from deep inside an import chain. The error is a
:class:`~cfgzip_lab.errors.CfgzipError` (the CLI prints its message and exits with status 2) and
an :class:`ImportError` (``try: import ... except ImportError`` still works).

>>> require_extra("workbench", "the workbench")          # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from .errors import CfgzipError

__all__ = ["EXTRAS", "Extra", "MissingExtraError", "missing_modules", "require_extra"]


@dataclass(frozen=True)
class Extra:
    """One optional part: its name in ``cfgzip-lab[name]`` and the modules it brings."""

    name: str
    modules: tuple[str, ...]
    description: str


EXTRAS: dict[str, Extra] = {
    extra.name: extra
    for extra in (
        Extra(
            "workbench",
            ("jupyterlab", "ipywidgets", "anywidget", "plotly", "railroad"),
            "the JupyterLab workbench (widgets, charts, railroad diagrams)",
        ),
        Extra("hf", ("transformers", "accelerate"), "generation and model loading with transformers"),
        Extra("gguf", ("gguf", "accelerate"), "tokenizers and models read from GGUF files"),
    )
}
"""The extras whose modules cfgzip_lab imports (``pyproject.toml``'s optional dependencies also
list ``serving``, ``test`` and ``docs``, which the package itself never imports)."""


class MissingExtraError(CfgzipError, ImportError):
    """A feature needs an extra that is not installed; ``extra`` names it, ``missing`` its modules."""

    def __init__(self, extra: str, feature: str, missing: tuple[str, ...]) -> None:
        super().__init__(
            f"{feature} needs the [{extra}] extra, which is not installed (missing: {', '.join(missing)}): "
            f"pip install 'cfgzip-lab[{extra}]'"
        )
        self.extra = extra
        self.feature = feature
        self.missing = missing


def missing_modules(extra: str, modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The modules of ``extra`` (or just ``modules``, some of them) that cannot be imported here.

    Found with :func:`importlib.util.find_spec`, without importing them.
    """
    wanted = EXTRAS[extra].modules if modules is None else modules
    unknown = set(wanted) - set(EXTRAS[extra].modules)
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not modules of the [{extra}] extra")
    return tuple(m for m in wanted if importlib.util.find_spec(m) is None)


def require_extra(extra: str, feature: str, *, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtraError` unless the modules of ``extra`` are installed.

    Parameters
    ----------
    extra
        A key of :data:`EXTRAS`: ``"workbench"``, ``"hf"`` or ``"gguf"``.
    feature
        What needs it, as the message's subject (``"the workbench"``, ``"reading model.gguf"``).
    modules
        Only these of the extra's modules (a feature that needs part of it); default all.

    Raises
    ------
    MissingExtraError
        Naming the extra, the missing modules and the pip command that installs them.
    """
    missing = missing_modules(extra, modules)
    if missing:
        raise MissingExtraError(extra, feature, missing)
