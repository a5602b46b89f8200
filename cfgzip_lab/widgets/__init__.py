"""The JupyterLab workbench: one module per panel, all sharing one :class:`WorkbenchSession`.

>>> from cfgzip_lab.widgets import Workbench
>>> Workbench()          # in a notebook cell                        # doctest: +SKIP

The core (``cfgzip_lab`` outside this package) never imports widgets or plotly.
"""

from __future__ import annotations

from ..extras import require_extra

# Before any panel imports ipywidgets or plotly: one message naming the extra, not a traceback.
require_extra("workbench", "the workbench (cfgzip_lab.widgets)", modules=("ipywidgets", "anywidget", "plotly"))

__all__ = [
    "Workbench",
    "WorkbenchSession",
    "EditorPanel",
    "SamplesPanel",
    "StructurePanel",
    "ClassesPanel",
    "DecoderPanel",
    "TimingsPanel",
    "ExportPanel",
]

_WHERE = {
    "Workbench": ".app",
    "WorkbenchSession": ".session",
    "EditorPanel": ".editor",
    "SamplesPanel": ".samples",
    "StructurePanel": ".structure",
    "ClassesPanel": ".classes_panel",
    "DecoderPanel": ".decoder",
    "TimingsPanel": ".timings",
    "ExportPanel": ".export",
}


def __getattr__(name: str):
    # Imported on first use: ``import cfgzip_lab.widgets.session`` stays free of plotly.
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
