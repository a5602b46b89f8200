"""The workbench in JupyterLab's theme: its CSS uses the ``--jp-*`` variables directly, and its
plotly charts get a template made from the same variables, read in the browser.

Plotly draws in the browser from a figure made in Python, with its own colours: in a dark
JupyterLab every chart was a white block (issue 21). :class:`ThemeProbe` (``static/
theme_probe.js``) reads the variables named in :data:`THEME_VARS` and reports them, again at
every theme switch; :func:`plotly_template` turns them into a plotly layout template (paper,
plot area, fonts, grid, axis lines, legend, hover labels); :func:`apply_theme` gives a chart
those values (:meth:`cfgzip_lab.widgets.Workbench.set_theme` does it for every chart).

Why the values and not the template itself: assigned to a live FigureWidget, the template made
the second subplot of the decoder's chart lose its category axis in JupyterLab (its bars drawn
at their token ids, seen in the browser test's screenshot), while explicit colours on the layout
and on every axis leave the axes alone. The template stays the one place the colours come from.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets as t

from ._figures import batch

__all__ = ["ThemeProbe", "THEME_VARS", "plotly_template", "apply_theme", "LIGHT"]

BUNDLE = Path(__file__).resolve().parent / "static" / "theme_probe.js"

#: the ``--jp-*`` variables (without the prefix) the charts take their colours from
THEME_VARS = (
    "layout-color0",
    "layout-color1",
    "layout-color2",
    "layout-color3",
    "ui-font-color0",
    "ui-font-color1",
    "ui-font-color2",
    "border-color1",
    "border-color2",
    "ui-font-family",
)

#: JupyterLab's light theme, for a front end that reports nothing (the default template)
LIGHT = {
    "light": True,
    "name": "JupyterLab Light",
    "vars": {
        "layout-color0": "white",
        "layout-color1": "white",
        "layout-color2": "#eeeeee",
        "layout-color3": "#bdbdbd",
        "ui-font-color0": "rgba(0, 0, 0, 1)",
        "ui-font-color1": "rgba(0, 0, 0, 0.87)",
        "ui-font-color2": "rgba(0, 0, 0, 0.54)",
        "border-color1": "#bdbdbd",
        "border-color2": "#e0e0e0",
        "ui-font-family": "system-ui, -apple-system, sans-serif",
    },
}


class ThemeProbe(anywidget.AnyWidget):
    """An invisible widget whose ``theme`` trait is JupyterLab's theme as the browser sees it:
    ``{"light": bool, "name": str, "vars": {variable: value}}`` (set by the front end)."""

    names = t.List(t.Unicode(), default_value=list(THEME_VARS)).tag(sync=True)
    theme = t.Dict().tag(sync=True)

    def __init__(self, **kwargs) -> None:
        self._esm = BUNDLE.read_text(encoding="utf-8")
        super().__init__(**kwargs)


def plotly_template(theme: dict | None) -> dict:
    """A plotly layout template (a plain dict: ``{"layout": {...}}``) in the colours of ``theme``
    (as :class:`ThemeProbe` reports it; None or empty: JupyterLab's light theme)."""
    theme = theme or LIGHT
    v = dict(LIGHT["vars"])
    v.update({k: x for k, x in (theme.get("vars") or {}).items() if x})
    background, plot = v["layout-color1"], v["layout-color1"]
    font, muted = v["ui-font-color1"], v["ui-font-color2"]
    grid, line = v["border-color2"], v["border-color1"]
    axis = dict(gridcolor=grid, linecolor=line, zerolinecolor=line, tickcolor=line, color=font)
    axis.update(title=dict(font=dict(color=font)))
    return {
        "layout": {
            "paper_bgcolor": background,
            "plot_bgcolor": plot,
            "font": {"color": font, "family": v["ui-font-family"]},
            "title": {"font": {"color": font}},
            "xaxis": axis,
            "yaxis": dict(axis),
            "legend": {"bgcolor": background, "font": {"color": font}},
            "hoverlabel": {"bgcolor": v["layout-color2"], "font": {"color": font}, "bordercolor": line},
            "annotationdefaults": {"font": {"color": muted}},
        }
    }


def apply_theme(figure, theme: dict | None) -> dict:
    """Colour ``figure`` (a plotly figure or FigureWidget) for ``theme``: paper, plot area, fonts,
    legend and hover labels, every x and y axis and the subplot titles; returns the template."""
    template = plotly_template(theme)
    layout = template["layout"]
    axis = {k: v for k, v in layout["xaxis"].items() if k != "title"}
    with batch(figure):  # a panel may be redrawing it from a worker thread right now
        figure.update_layout(
            paper_bgcolor=layout["paper_bgcolor"],
            plot_bgcolor=layout["plot_bgcolor"],
            font=layout["font"],
            legend=layout["legend"],
            hoverlabel=layout["hoverlabel"],
        )
        figure.update_xaxes(**axis, title_font_color=layout["font"]["color"])
        figure.update_yaxes(**axis, title_font_color=layout["font"]["color"])
        figure.update_annotations(font_color=layout["font"]["color"])
        if figure.layout.title is not None:
            figure.layout.title.font.color = layout["font"]["color"]
    return template
