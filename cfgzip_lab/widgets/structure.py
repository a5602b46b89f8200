"""Structure: the grammar's sizes at each stage and each GNF step, as a table and a chart."""

from __future__ import annotations

import ipywidgets as w
import plotly.graph_objects as go

from ._base import Panel
from ._format import esc, figure_layout, fmt_seconds, table

__all__ = ["StructurePanel"]

_STAT_LABELS = {
    "rules": "rules (as written)",
    "cfg_nonterminals": "byte-CFG nonterminals",
    "cfg_productions": "byte-CFG productions",
    "gnf_nonterminals": "GNF nonterminals",
    "gnf_productions": "GNF productions (listed)",
    "gnf_dag_nodes": "GNF tail-DAG nodes",
    "byte_classes": "byte classes",
}


class StructurePanel(Panel):
    """Grammar stats and GNF steps. Public method: :meth:`refresh` (runs on every check)."""

    error_sources = ("structure",)

    def __init__(self, session, *, preview_lines: int = 300) -> None:
        super().__init__(session)
        self.preview_lines = preview_lines
        self.stats = w.HTML()
        self.stats.add_class("cfgzip-stats")
        self.steps = w.HTML()
        self.steps.add_class("cfgzip-gnf-steps")
        self.figure = go.FigureWidget(
            layout=figure_layout(
                "GNF steps: size after each step", barmode="group", height=360, width=760, yaxis=dict(title="count")
            )
        )
        for name in ("nonterminals", "productions", "DAG nodes"):
            self.figure.add_bar(name=name, x=[], y=[])
        self.figure_box = w.Box([self.figure])
        self.figure_box.add_class("cfgzip-structure-chart")
        self.preview = w.Textarea(layout=w.Layout(width="100%", height="260px"), disabled=True)
        self.preview.add_class("cfgzip-gnf-preview")
        preview = w.Accordion(children=[self.preview], titles=("GNF productions (first lines)",))
        preview.selected_index = None
        self.widget = w.VBox(
            [w.HBox([self.stats, w.HTML("&nbsp;" * 6), self.steps]), self.figure_box, preview, self.error_box]
        )
        self.widget.add_class("cfgzip-structure")
        session.on("grammar", self._guarded_refresh)
        self._guarded_refresh()

    def _guarded_refresh(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # last resort: a refresh runs from session events, maybe in a worker thread
            self.session.record_error("structure", exc)

    def refresh(self) -> None:
        compiled = self.session.compiled
        if compiled is None:
            self.stats.value = '<span class="cfgzip-muted">the grammar does not compile; see the editor</span>'
            self.steps.value = ""
            with self.figure.batch_update():
                for trace in self.figure.data:
                    trace.x, trace.y = [], []
            self.preview.value = ""
            return
        stats = compiled.stats()
        rows = [[esc(_STAT_LABELS.get(k, k)), f"{v:,}"] for k, v in stats.items()]
        rows += [[f"time: {esc(k)}", fmt_seconds(v)] for k, v in compiled.seconds.items()]
        self.stats.value = "<b>Grammar</b>" + table(["", ""], rows, numeric=(1,))
        steps = compiled.gnf.steps
        self.steps.value = "<b>GNF steps</b>" + table(
            ["step", "nonterminals", "productions", "DAG nodes", "time"],
            [
                [esc(s.name), f"{s.nonterminals:,}", f"{s.productions:,}", f"{s.dag_nodes:,}", fmt_seconds(s.seconds)]
                for s in steps
            ],
            numeric=(1, 2, 3, 4),
        )
        names = [s.name for s in steps]
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = names, [s.nonterminals for s in steps]
            self.figure.data[1].x, self.figure.data[1].y = names, [s.productions for s in steps]
            self.figure.data[2].x, self.figure.data[2].y = names, [s.dag_nodes for s in steps]
        text = compiled.gnf.to_text(limit=self.preview_lines)
        if compiled.gnf.num_productions > self.preview_lines:
            text += f"\n… ({compiled.gnf.num_productions - self.preview_lines:,} more)"
        self.preview.value = text
