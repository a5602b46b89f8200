"""Expansion backends, one file each, chosen through one dispatch table.

============  ===============================  =============================================
name          module                           runs
============  ===============================  =============================================
``numpy``     :mod:`.cpu`                      CPU: union tables + scatter, memoised rows
``torch``     :mod:`.torch`                    any device, torch ops (the device reference)
``triton``    :mod:`.triton`                   CUDA: one launch for the whole batch
============  ===============================  =============================================

:func:`backend_for` picks, for a requested backend and a device, which one runs: ``auto``
means numpy on CPU, Triton on CUDA when Triton imports, torch otherwise. The backends take
the same :class:`~.tables.ExpansionTables` and give the same bits (tests compare them);
only :class:`~cfgzip_lab.expand.Expander` is public.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Literal

from .tables import ExpansionTables

if TYPE_CHECKING:
    import torch

__all__ = ["BACKENDS", "BackendName", "ExpansionTables", "backend_for", "backend_class"]

BackendName = Literal["numpy", "torch", "triton"]

# name -> (module, class); modules are imported when first used (Triton only with CUDA).
BACKENDS: dict[str, tuple[str, str]] = {
    "numpy": (".cpu", "CpuExpansion"),
    "torch": (".torch", "TorchExpansion"),
    "triton": (".triton", "TritonExpansion"),
}


def backend_class(name: str) -> type:
    """The backend class registered under ``name``."""
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module, __name__), cls)


def backend_for(requested: str, device: torch.device) -> BackendName:
    """Which backend runs a request on ``device``.

    ``auto``: numpy on CPU; on CUDA, Triton when it imports, else torch; torch elsewhere.
    An explicit name is honoured, except ``triton`` off CUDA, which falls back to torch
    (unless Triton's interpreter is on, ``TRITON_INTERPRET=1``).
    """
    if requested == "auto":
        if device.type == "cpu":
            return "numpy"
        if device.type == "cuda" and _triton_available():
            return "triton"
        return "torch"
    if requested == "triton" and not (device.type == "cuda" and _triton_available()) and not _interpreting():
        return "torch"
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}")
    return requested  # type: ignore[return-value]


def _triton_available() -> bool:
    from .triton import available

    return available()


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET") == "1" and _triton_available()
