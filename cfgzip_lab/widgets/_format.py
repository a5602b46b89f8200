"""Small HTML helpers shared by the panels: escaping, token labels, tables, CSS."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

from ..grammar.diagnostics import Diagnostic
from ..vocab import show_bytes

# One stylesheet for the whole workbench, injected once by the app (and by panels shown
# alone). Every rule is scoped to a cfgzip-* class.
CSS = """
<style>
/* Every colour is one of JupyterLab's theme variables (with the light theme's value as the
   fallback outside JupyterLab), so tables, chips, marks and diagrams follow a dark theme too. */
.cfgzip-app { font-size: 13px; color: var(--jp-ui-font-color1, #000); }
.cfgzip-editor-text textarea { font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.4; white-space: pre; overflow-wrap: normal; overflow-x: auto; }
.cfgzip-samples-text textarea, .cfgzip-test-text textarea { font-family: var(--jp-code-font-family, monospace); font-size: 12px; }
.cfgzip-table { border-collapse: collapse; margin: 4px 0; font-size: 12px; color: var(--jp-ui-font-color1, #000); }
.cfgzip-table th, .cfgzip-table td { border: 1px solid var(--jp-border-color2, #ddd); padding: 2px 6px; text-align: left; vertical-align: top; }
.cfgzip-table th { background: var(--jp-layout-color2, #f3f3f3); color: var(--jp-ui-font-color1, #000); }
.cfgzip-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cfgzip-table tr.cfgzip-fail-row td { background: color-mix(in srgb, var(--jp-error-color1, #cf222e) 10%, transparent); }
.cfgzip-code { font-family: var(--jp-code-font-family, monospace); white-space: pre; }
.cfgzip-tok { font-family: var(--jp-code-font-family, monospace); background: var(--jp-layout-color2, #f1f4f8); color: var(--jp-content-font-color1, #000); border: 1px solid var(--jp-border-color2, #e0e0e0); border-radius: 3px; padding: 0 3px; white-space: pre; }
.cfgzip-tok.cfgzip-forced { border-style: dashed; border-color: var(--jp-brand-color1, #1976d2); }
.cfgzip-ok { color: var(--jp-success-color1, #1a7f37); font-weight: bold; }
.cfgzip-bad { color: var(--jp-error-color1, #cf222e); font-weight: bold; }
.cfgzip-warn { color: var(--jp-warn-color1, #9a6700); font-weight: bold; }
.cfgzip-muted { color: var(--jp-ui-font-color2, #777); }
.cfgzip-diag { border-left: 3px solid var(--jp-error-color1, #cf222e); padding: 2px 6px; margin: 4px 0; }
.cfgzip-diag.warning { border-left-color: var(--jp-warn-color1, #d4a72c); }
.cfgzip-diag pre { margin: 2px 0; font-size: 12px; }
.cfgzip-fix { margin-left: 6px; font-size: 12px; cursor: pointer; color: var(--jp-ui-font-color1, #000);
  background: var(--jp-layout-color2, #eee); border: 1px solid var(--jp-border-color1, #ccc); border-radius: 3px; }
.cfgzip-app .cfgzip-diag[data-action] { color: inherit; }
.cfgzip-diag[data-action]:hover { background: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 8%, transparent); }
.cfgzip-editor-side > * { flex-shrink: 0; }
.cfgzip-error-box { border: 1px solid var(--jp-error-color1, #cf222e); background: color-mix(in srgb, var(--jp-error-color1, #cf222e) 8%, transparent); padding: 4px 8px; }
.cfgzip-error-box pre { max-height: 12em; overflow: auto; font-size: 11px; }
.cfgzip-generated { background: color-mix(in srgb, var(--jp-success-color1, #1a7f37) 16%, transparent); }
mark.cfgzip-fail { background: color-mix(in srgb, var(--jp-error-color1, #cf222e) 25%, transparent); color: var(--jp-error-color1, #cf222e); font-weight: bold; }
mark.cfgzip-span-mark { background: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 35%, transparent); color: inherit; border-radius: 2px; }
mark.cfgzip-span-empty { padding: 0 1px; border-left: 2px solid var(--jp-brand-color1, #1976d2); }
/* railroad diagrams (the railroad-diagrams package's light style, re-coloured) */
.cfgzip-app svg.railroad-diagram { background-color: var(--jp-layout-color1, #fff); }
.cfgzip-app svg.railroad-diagram path { stroke: var(--jp-ui-font-color1, #000); }
.cfgzip-app svg.railroad-diagram text { fill: var(--jp-ui-font-color1, #000); }
.cfgzip-app svg.railroad-diagram rect { stroke: var(--jp-ui-font-color1, #000); fill: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 14%, var(--jp-layout-color1, #fff)); }
.cfgzip-app svg.railroad-diagram g.non-terminal rect { fill: var(--jp-layout-color2, #eee); }
.cfgzip-app svg.railroad-diagram g.non-terminal { cursor: pointer; }
.cfgzip-app svg.railroad-diagram g.non-terminal:hover rect { stroke: var(--jp-brand-color1, #1976d2); stroke-width: 3; }
/* clickable rule names and parse trees */
.cfgzip-app [data-rule] { cursor: pointer; text-decoration: underline dotted; }
.cfgzip-app [data-rule]:hover { color: var(--jp-brand-color1, #1976d2); }
.cfgzip-app [data-action] { cursor: pointer; color: var(--jp-brand-color1, #1976d2); }
.cfgzip-rule-table, .cfgzip-first-follow, .cfgzip-samples-results, .cfgzip-tests-table, .cfgzip-schema-report { display: block; max-width: 100%; overflow-x: auto; }
.cfgzip-tree { font-family: var(--jp-code-font-family, monospace); font-size: 12px; }
.cfgzip-tree details { margin-left: 14px; }
.cfgzip-tree summary { cursor: default; }
.cfgzip-tree .cfgzip-node[data-span]:hover, .cfgzip-tree .cfgzip-leaf[data-span]:hover { background: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 20%, transparent); }
.cfgzip-tree .cfgzip-leaf { margin-left: 14px; display: block; }
.cfgzip-tree .cfgzip-open { color: var(--jp-warn-color1, #9a6700); }
.cfgzip-tree-canvas { overflow: auto; max-height: 560px; border: 1px solid var(--jp-border-color2, #e0e0e0); margin: 4px 0; background: var(--jp-layout-color1, #fff); }
.cfgzip-tree-svg .cfgzip-tree-edge { fill: none; stroke: var(--jp-border-color1, #bdbdbd); stroke-width: 1.2; }
.cfgzip-tree-svg .cfgzip-tree-node > rect { fill: var(--jp-layout-color2, #eee); stroke: var(--jp-border-color1, #bdbdbd); }
.cfgzip-tree-svg g.cfgzip-tree-rule > rect { fill: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 12%, var(--jp-layout-color1, #fff)); }
.cfgzip-tree-svg .cfgzip-tree-open > rect { stroke: var(--jp-warn-color1, #9a6700); stroke-dasharray: 4 2; }
.cfgzip-tree-svg .cfgzip-tree-node:hover > rect { fill: color-mix(in srgb, var(--jp-brand-color1, #1976d2) 30%, var(--jp-layout-color1, #fff)); }
.cfgzip-tree-svg text { fill: var(--jp-content-font-color1, #212121); }
.cfgzip-tree-svg .cfgzip-tree-text { fill: var(--jp-content-font-color2, #616161); }
.cfgzip-tree-svg tspan.cfgzip-tree-rule { font-weight: bold; cursor: pointer; }
.cfgzip-tree-svg .cfgzip-tree-toggle { cursor: pointer; }
.cfgzip-tree-svg .cfgzip-tree-toggle rect { fill: var(--jp-brand-color1, #1976d2); }
.cfgzip-tree-svg .cfgzip-tree-toggle text { fill: #fff; font-weight: bold; }
.cfgzip-tree-sample { border: 1px solid var(--jp-border-color2, #e0e0e0); padding: 4px 6px; background: var(--jp-layout-color1, #fff); white-space: pre-wrap; }
</style>
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


_RULE_WORD = re.compile(r"\brule ([A-Za-z_.\-][A-Za-z0-9_.\-]*)")


def rule_links(escaped: str) -> str:
    """Escaped text with every "rule NAME" made a link to that rule's definition (a
    :class:`~.html_view.HtmlView` sends the click): ``(rule turn, line 3)``."""
    return _RULE_WORD.sub(lambda m: f'<span data-rule="{m.group(1)}">rule {m.group(1)}</span>', escaped)


def token_label(vocab, token_id: int) -> str:
    """Plain-text label of a token: its text between quotes, or ``<name>`` for a non-text id."""
    data = vocab.token_bytes[token_id]
    if data:
        return f"'{show_bytes(data)}'"
    names = _special_names(vocab)
    return names.get(token_id, f"<id {token_id}>")


def _special_names(vocab) -> dict[int, str]:
    cached = getattr(vocab, "_cfgzip_special_names", None)
    if cached is None:
        cached = {int(i): s for s, i in dict(vocab.special_tokens).items()}
        try:
            object.__setattr__(vocab, "_cfgzip_special_names", cached)
        except (AttributeError, TypeError):  # slots or a C type: recompute next time
            pass
    return cached


def token_html(vocab, token_id: int, *, with_id: bool = True) -> str:
    label = esc(token_label(vocab, token_id))
    suffix = f' <span class="cfgzip-muted">#{token_id}</span>' if with_id else ""
    return f'<span class="cfgzip-tok">{label}</span>{suffix}'


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence],
    *,
    css: str = "",
    numeric: Sequence[int] = (),
    row_css: Sequence[str] = (),
) -> str:
    """An HTML table; cells are inserted as given (escape them first), ``numeric`` columns
    right-aligned, ``row_css[i]`` a class for row ``i`` (``cfgzip-fail-row``: a failure, in red)."""
    head = "".join(f"<th>{h}</th>" for h in headers) if any(headers) else ""
    body = []
    for n, row in enumerate(rows):
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        cls = row_css[n] if n < len(row_css) and row_css[n] else ""
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f'<table class="cfgzip-table {css}">{thead}<tbody>{"".join(body)}</tbody></table>'


def diagnostic_html(diagnostic: Diagnostic, text: str, *, context: int = 1, fix: tuple[int, str] | None = None) -> str:
    """One diagnostic: ``line L, column C: message`` and the lines around it with a caret.
    ``fix``: (its index, the label of its quick fix): a "Fix:" button (``data-action="fix"``)."""
    lines = text.splitlines()
    excerpt = []
    if 1 <= diagnostic.line <= len(lines):
        first = max(1, diagnostic.line - context)
        width = len(str(diagnostic.line))
        for n in range(first, diagnostic.line + 1):
            excerpt.append(f"{n:>{width}} | {lines[n - 1]}")
        excerpt.append(f"{'':>{width}} | {' ' * (diagnostic.column - 1)}^")
    code = esc("\n".join(excerpt))
    severity = diagnostic.severity
    return (
        f'<div class="cfgzip-diag {severity}" data-line="{diagnostic.line}" data-column="{diagnostic.column}" '
        f'data-action="jump" data-arg="{diagnostic.line}:{diagnostic.column}" '
        f'title="click: the cursor to line {diagnostic.line}, column {diagnostic.column}">'
        f"<b>line {diagnostic.line}, column {diagnostic.column}</b>: "
        f'<span class="{"cfgzip-bad" if severity == "error" else "cfgzip-warn"}">{severity}</span>: '
        f"{esc(diagnostic.message)}{_fix_button(fix)}<pre>{code}</pre></div>"
    )


def _fix_button(fix: tuple[int, str] | None) -> str:
    if fix is None:
        return ""
    index, label = fix
    return (
        f' <button class="cfgzip-fix" data-action="fix" data-arg="{index}" title="quick fix: {esc(label)}">'
        f"Fix: {esc(label)}</button>"
    )


def error_html(record) -> str:
    """An ErrorRecord from a worker or a handler, with its traceback (if any) folded."""
    details = (
        f"<details><summary>traceback</summary><pre>{esc(record.details)}</pre></details>" if record.details else ""
    )
    return (
        f'<div class="cfgzip-error-box"><span class="cfgzip-bad">{esc(record.where)} failed</span>: '
        f"{esc(record.message)}{details}</div>"
    )


def figure_layout(title: str, **extra) -> dict:
    """Plotly layout shared by the panels: the title above a horizontal legend, no overlap."""
    layout = dict(
        title=dict(text=title, y=0.97, yanchor="top", x=0.02, font=dict(size=14)),
        margin=dict(l=55, r=20, t=80, b=50),
        legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0),
        height=320,
    )
    layout.update(extra)
    return layout


def fmt_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"
