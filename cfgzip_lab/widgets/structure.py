"""Structure: the grammar as its author wrote it, and what the normal form makes of each rule.

Per source rule: its railroad diagram (:mod:`cfgzip_lab.grammar.railroad`), whether it can
match nothing (NULLABLE), what it can start with and what can follow it, as the grammar's own
literals and classes (FIRST and FOLLOW, :mod:`cfgzip_lab.grammar.authoring`), one shortest
sentence, which rules it can start with (left corners; a rule among its own is
left-recursive), and its sizes in the byte CFG and in GNF
(:func:`cfgzip_lab.grammar.provenance.rule_sizes`): the rules that make GNF grow come first.
For a JSON Schema each rule also names the JSON pointer it enforces. Every rule name, and every
nonterminal box of a railroad diagram, is a link to the rule's definition in the editor. The
author's checks (words that can run together) are listed above the rules. Below: the grammar's
sizes at each stage and each GNF step, and the GNF nonterminals with the source construct each
one stands for. Numbers carry thousands separators everywhere.
"""

from __future__ import annotations

import ipywidgets as w
import plotly.graph_objects as go

from ..grammar.analysis import analyse, format_code_points
from ..grammar.authoring import first_terminals, follow_terminals, run_together_lint, shortest_sentences
from ..grammar.provenance import rule_sizes
from ..grammar.railroad import DIAGRAM_CSS, rule_svg
from ._base import Panel
from ._figures import batch
from ._format import esc, figure_layout, fmt_seconds, table
from .html_view import HtmlView

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


def _yes(flag: bool) -> str:
    return "yes" if flag else ""


def _terms(terms, limit: int = 8) -> str:
    """``"left" | "right"``: literals and classes as written, each once, at most ``limit``."""
    texts = list(dict.fromkeys(t.text for t in terms))
    more = f" and {len(texts) - limit} more" if len(texts) > limit else ""
    return " | ".join(texts[:limit]) + more if texts else "nothing"


def _follow(found) -> str:
    """``";" or the end of the input``: FOLLOW as literals, and whether the input may end there."""
    if found is None:
        return ""
    terms, ends = found
    if not terms:
        return "the end of the input" if ends else "nothing (the rule is not used)"
    return _terms(terms) + (" or the end of the input" if ends else "")


def _short(found) -> str:
    if found is None:
        return "(never ends)"
    length, text = found
    shown = repr(text if len(text) <= 40 else text[:39] + "…")
    return shown if length <= 40 else f"{shown} ({length:,} characters)"


def author_facts(compiled, lint=None) -> dict:
    """FIRST and FOLLOW as literals, a shortest sentence per rule and the run-together lint of a
    compiled grammar (what the Structure tab shows; computed once per grammar; ``lint``: the
    session's, when it has it). Measured on c_like: 53 + 76 + 24 ms, and 98 ms for the lint."""
    ast = compiled.ast
    return {
        "first": first_terminals(ast),
        "follow": follow_terminals(ast),
        "shortest": shortest_sentences(ast),
        "lint": run_together_lint(ast) if lint is None else lint,
    }


class StructurePanel(Panel):
    """Grammar structure for authors. Public methods: :meth:`refresh` (runs on every check),
    :meth:`show_rule` (one rule's diagram and sets), :meth:`show_all_diagrams`."""

    error_sources = ("structure",)
    refresh_where = "structure"

    def __init__(self, session, *, preview_lines: int = 300, rules_shown: int = 40) -> None:
        super().__init__(session)
        self.preview_lines = preview_lines
        self.rules_shown = rules_shown
        self.rule_rows: list[dict] = []  # what the rules table shows, for code and tests
        self.stats = w.HTML()
        self.stats.add_class("cfgzip-stats")
        self.steps = w.HTML()
        self.steps.add_class("cfgzip-gnf-steps")
        self.rules_table = HtmlView()
        self.rules_table.add_class("cfgzip-rule-table")
        self.checks = HtmlView()
        self.checks.add_class("cfgzip-author-checks")
        self.rule_picker = w.Dropdown(options=[], description="Rule")
        self.rule_picker.add_class("cfgzip-rule-picker")
        self._picking = False
        self.rule_picker.observe(self._on_pick, names="value")
        self.diagram = HtmlView()
        self.diagram.add_class("cfgzip-railroad")
        self.all_diagrams = HtmlView()
        self.all_diagrams.add_class("cfgzip-railroad-all")
        self.sets_table = HtmlView()
        self.sets_table.add_class("cfgzip-first-follow")
        for view in (self.rules_table, self.checks, self.diagram, self.all_diagrams, self.sets_table):
            view.on_rule(lambda name: self._handler("structure", lambda: self.jump_to_rule(name))())
        self.figure = go.FigureWidget(
            layout=figure_layout(
                "GNF steps: size after each step",
                barmode="group",
                height=360,
                width=760,
                yaxis=dict(title="count", tickformat=",d"),
            )
        )
        for name in ("nonterminals", "productions", "DAG nodes"):
            self.figure.add_bar(name=name, x=[], y=[], hovertemplate="%{x}: %{y:,d} " + name + "<extra></extra>")
        self.figure_box = w.Box([self.figure])
        self.figure_box.add_class("cfgzip-structure-chart")
        self.preview = w.Textarea(layout=w.Layout(width="100%", height="260px"), disabled=True)
        self.preview.add_class("cfgzip-gnf-preview")
        self.symbols = w.HTML()
        self.symbols.add_class("cfgzip-gnf-symbols")
        self.more = w.Accordion(
            children=[self.all_diagrams, self.sets_table, self.symbols, self.preview],
            titles=(
                "Railroad diagrams of every rule",
                "FIRST and FOLLOW of every rule (as literals), shortest sentences",
                "GNF nonterminals and the source they come from",
                "GNF productions (first lines)",
            ),
        )
        self.more.selected_index = None
        self.more.observe(self._on_open, names="selected_index")
        self.widget = w.VBox(
            [
                w.HTML(f"<style>{DIAGRAM_CSS}</style>"),
                w.HBox([self.rule_picker]),
                self.diagram,
                self.checks,
                self.rules_table,
                w.HBox([self.stats, w.HTML("&nbsp;" * 6), self.steps]),
                self.figure_box,
                self.more,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-structure")
        session.on("grammar", self._guarded_refresh)
        self._guarded_refresh()

    # -- public methods ----------------------------------------------------------------

    def refresh(self) -> None:
        compiled = self.session.compiled
        self.all_diagrams.value = ""
        if compiled is None:
            self.stats.value = '<span class="cfgzip-muted">the grammar does not compile; see the editor</span>'
            self.steps.value = self.rules_table.value = self.diagram.value = self.symbols.value = ""
            self.checks.value = self.sets_table.value = ""
            self.rule_rows = []
            with batch(self.figure):
                for trace in self.figure.data:
                    trace.x, trace.y = [], []
            self.preview.value = ""
            self._set_rules([])
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
        with batch(self.figure):
            self.figure.data[0].x, self.figure.data[0].y = names, [s.nonterminals for s in steps]
            self.figure.data[1].x, self.figure.data[1].y = names, [s.productions for s in steps]
            self.figure.data[2].x, self.figure.data[2].y = names, [s.dag_nodes for s in steps]
        text = compiled.gnf.to_text(limit=self.preview_lines)
        if compiled.gnf.num_productions > self.preview_lines:
            text += f"\n… ({compiled.gnf.num_productions - self.preview_lines:,} more)"
        self.preview.value = text
        self._show_rules(compiled)
        self._show_symbols(compiled)
        self._set_rules(list(compiled.ast.rules))
        if self.more.selected_index == 0:
            self.show_all_diagrams()

    def jump_to_rule(self, name: str) -> dict | None:
        """Show ``name``'s definition in the editor (a click on a rule name or a railroad box)."""
        return self.session.jump_to_rule(name)

    def show_rule(self, name: str | None = None) -> str:
        """Show one rule's railroad diagram with its sets and sizes; returns the SVG."""
        compiled = self.session.compiled
        if compiled is None:
            self.diagram.value = ""
            return ""
        name = name or self.rule_picker.value or compiled.ast.root
        rule = compiled.ast.rules[name]
        svg = rule_svg(rule, compiled.ast.text)
        row = next((r for r in self.rule_rows if r["rule"] == name), None)
        facts = ""
        if row is not None:
            pointer = (
                f' · enforces <span class="cfgzip-code">{esc(row["pointer"])}</span>' if row.get("pointer") else ""
            )
            corners = ", ".join(f'<span data-rule="{esc(r)}">{esc(r)}</span>' for r in row["left_corners"])
            facts = (
                f'<p><b data-rule="{esc(name)}" title="go to its definition">{esc(name)}</b> (line {row["line"]})'
                f"{pointer} · can match nothing: <b>{'yes' if row['nullable'] else 'no'}</b>"
                f' · starts with: <span class="cfgzip-code">{esc(row["first_terms"])}</span>'
                f' (characters: <span class="cfgzip-code">{esc(row["first"])}</span>)'
                f' · can be followed by: <span class="cfgzip-code">{esc(row["follow"])}</span>'
                f' · shortest sentence: <span class="cfgzip-code">{esc(row["shortest"])}</span>'
                + (f" · starts with rules: {corners}" if row["left_corners"] else "")
                + (' · <span class="cfgzip-warn">left-recursive</span>' if row["left_recursive"] else "")
                + f"<br>byte CFG: {row['cfg_productions']:,} productions · GNF: {row['gnf_nonterminals']:,} "
                f"nonterminals, {row['gnf_productions']:,} productions · click a box to go to that rule</p>"
            )
        self.diagram.value = f'{facts}<div class="cfgzip-railroad-box" style="overflow-x:auto">{svg}</div>'
        if self.rule_picker.value != name and name in self.rule_picker.options:
            self._picking = True
            try:
                self.rule_picker.value = name
            finally:
                self._picking = False
        return svg

    def show_all_diagrams(self) -> None:
        """Every rule's diagram, in source order (drawn when the section is opened)."""
        compiled = self.session.compiled
        if compiled is None:
            self.all_diagrams.value = ""
            return
        parts = [
            f'<div id="rule-{esc(name)}"><b data-rule="{esc(name)}">{esc(name)}</b>{rule_svg(rule, compiled.ast.text)}</div>'
            for name, rule in compiled.ast.rules.items()
        ]
        self.all_diagrams.value = f'<div style="overflow-x:auto">{"".join(parts)}</div>'

    # -- views ------------------------------------------------------------------------

    def _show_rules(self, compiled) -> None:
        sets = analyse(compiled.ast)
        sizes = rule_sizes(compiled.cfg, compiled.gnf)
        lint = self.session.derived("lint", lambda c: run_together_lint(c.ast), compiled)
        facts = self.session.derived("author_facts", lambda c: author_facts(c, lint), compiled)
        pointer = self.session.rule_pointer
        self.rule_rows = [
            {
                "rule": s.rule,
                "line": s.line,
                "pointer": pointer(s.rule),
                "nullable": sets[s.rule].nullable,
                "first": format_code_points(sets[s.rule].first, limit=8),
                "first_terms": _terms(facts["first"].get(s.rule, ())),
                "follow": _follow(facts["follow"].get(s.rule)),
                "shortest": _short(facts["shortest"].get(s.rule)),
                "left_corners": sets[s.rule].left_corners,
                "left_recursive": sets[s.rule].left_recursive,
                "cfg_productions": s.cfg_productions,
                "gnf_nonterminals": s.gnf_nonterminals,
                "gnf_productions": s.gnf_productions,
                "growth": s.growth,
            }
            for s in sizes
            if s.rule in sets
        ]
        shown = self.rule_rows[: self.rules_shown]
        with_pointers = any(r["pointer"] for r in shown)
        rows = [
            [
                f'<span class="cfgzip-code" data-rule="{esc(r["rule"])}" title="go to its definition">{esc(r["rule"])}</span>'
                + (
                    f'<br><span class="cfgzip-muted">{esc(r["pointer"])}</span>'
                    if with_pointers and r["pointer"]
                    else ""
                ),
                f"{r['line']:,}" if r["line"] else "",
                _yes(r["nullable"]),
                f'<span class="cfgzip-code">{esc(r["first_terms"])}</span>',
                f'<span class="cfgzip-code">{esc(r["shortest"])}</span>',
                _yes(r["left_recursive"]),
                f"{r['cfg_productions']:,}",
                f"{r['gnf_nonterminals']:,}",
                f"{r['gnf_productions']:,}",
                f"{r['growth']:,.1f}×" if r["gnf_nonterminals"] else '<span class="cfgzip-muted">inlined</span>',
            ]
            for r in shown
        ]
        more = (
            f'<p class="cfgzip-muted">{len(self.rule_rows) - len(shown):,} more rules, smaller in GNF</p>'
            if len(self.rule_rows) > len(shown)
            else ""
        )
        self.rules_table.value = (
            "<b>Rules, largest in GNF first</b> (which rules make the normal form grow; a GNF nonterminal "
            "made from several rules counts for each)"
            + table(
                [
                    "rule" + (" (JSON pointer)" if with_pointers else ""),
                    "line",
                    "nullable",
                    "FIRST (can start with)",
                    "shortest sentence",
                    "left-recursive",
                    "byte-CFG productions",
                    "GNF nonterminals",
                    "GNF productions",
                    "growth",
                ],
                rows,
                numeric=(1, 6, 7, 8, 9),
            )
            + more
        )
        self._show_checks(facts)
        self.sets_table.value = table(
            ["rule", "FIRST (literals)", "FOLLOW (literals)", "shortest sentence"],
            [
                [
                    f'<span class="cfgzip-code" data-rule="{esc(r["rule"])}">{esc(r["rule"])}</span>',
                    f'<span class="cfgzip-code">{esc(r["first_terms"])}</span>',
                    f'<span class="cfgzip-code">{esc(r["follow"])}</span>',
                    f'<span class="cfgzip-code">{esc(r["shortest"])}</span>',
                ]
                for r in sorted(self.rule_rows, key=lambda r: r["line"] or 0)
            ],
        )

    def _show_checks(self, facts) -> None:
        """The author's checks: where words can run together (the nullable-separator lint)."""
        lint = facts["lint"]
        if not lint:
            self.checks.value = (
                '<p class="cfgzip-muted cfgzip-lint-none">author\'s checks: no keyword is next to a separator '
                "that can match nothing</p>"
            )
            return
        items = "".join(
            f'<li><span data-rule="{esc(_rule_at(d, self.session))}">line {d.line}, column {d.column}</span>: '
            f"{esc(d.message)}</li>"
            for d in lint
        )
        self.checks.value = (
            f'<p><b class="cfgzip-warn">Author\'s checks: {len(lint)} place(s) where words can run together</b>'
            f'</p><ul class="cfgzip-lint">{items}</ul>'
        )

    def _show_symbols(self, compiled, limit: int = 200) -> None:
        gnf = compiled.gnf
        rows = []
        for a in range(min(limit, gnf.num_nonterminals)):
            listed = sum(gnf.store.count(t) for t in set(gnf.table[a].values()))
            rows.append(
                [
                    a,
                    f'<span class="cfgzip-code">{esc(gnf.names[a])}</span>',
                    esc(gnf.describe_symbol(a)),
                    f"{listed:,}",
                ]
            )
        more = (
            f'<p class="cfgzip-muted">first {limit:,} of {gnf.num_nonterminals:,}</p>'
            if gnf.num_nonterminals > limit
            else ""
        )
        self.symbols.value = (
            table(["#", "GNF name", "stands for (in the grammar text)", "productions"], rows, numeric=(0, 3)) + more
        )

    def _set_rules(self, names: list[str]) -> None:
        self._picking = True
        try:
            current = self.rule_picker.value
            self.rule_picker.options = names
            fallback = "root" if "root" in names else (names[0] if names else None)
            self.rule_picker.value = current if current in names else fallback
        finally:
            self._picking = False
        if names:
            self.show_rule(self.rule_picker.value)

    def _on_pick(self, _change) -> None:
        if not self._picking and self.rule_picker.value:
            self._handler("structure", self.show_rule)()

    def _on_open(self, _change) -> None:
        if self.more.selected_index == 0 and not self.all_diagrams.value:
            self._handler("structure", self.show_all_diagrams)()


def _rule_at(diagnostic, session) -> str:
    """The rule whose definition holds a diagnostic's line (for its jump link)."""
    compiled = session.compiled
    if compiled is None:
        return ""
    text, best = compiled.ast.text, ""
    for name, rule in compiled.ast.rules.items():
        if rule.span and text.count("\n", 0, rule.span[0]) + 1 <= diagnostic.line:
            best = name
    return best
