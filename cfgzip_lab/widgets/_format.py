"""Small HTML helpers shared by the panels: escaping, token labels, tables, CSS."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from ..grammar.diagnostics import Diagnostic
from ..vocab import show_bytes

# One stylesheet for the whole workbench, injected once by the app (and by panels shown
# alone). Every rule is scoped to a cfgzip-* class.
CSS = """
<style>
.cfgzip-app { font-size: 13px; }
.cfgzip-editor-text textarea { font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.4; white-space: pre; overflow-wrap: normal; overflow-x: auto; }
.cfgzip-samples-text textarea { font-family: var(--jp-code-font-family, monospace); font-size: 12px; }
.cfgzip-table { border-collapse: collapse; margin: 4px 0; font-size: 12px; }
.cfgzip-table th, .cfgzip-table td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
.cfgzip-table th { background: #f3f3f3; }
.cfgzip-table td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cfgzip-code { font-family: var(--jp-code-font-family, monospace); white-space: pre; }
.cfgzip-tok { font-family: var(--jp-code-font-family, monospace); background: #f1f4f8; border-radius: 3px; padding: 0 3px; white-space: pre; }
.cfgzip-ok { color: #1a7f37; font-weight: bold; }
.cfgzip-bad { color: #cf222e; font-weight: bold; }
.cfgzip-warn { color: #9a6700; font-weight: bold; }
.cfgzip-muted { color: #777; }
.cfgzip-diag { border-left: 3px solid #cf222e; padding: 2px 6px; margin: 4px 0; }
.cfgzip-diag.warning { border-left-color: #d4a72c; }
.cfgzip-diag pre { margin: 2px 0; font-size: 12px; }
.cfgzip-error-box { border: 1px solid #cf222e; background: #fff5f5; padding: 4px 8px; }
.cfgzip-error-box pre { max-height: 12em; overflow: auto; font-size: 11px; }
.cfgzip-generated { background: #e6ffec; }
</style>
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


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


def table(headers: Sequence[str], rows: Iterable[Sequence], *, css: str = "", numeric: Sequence[int] = ()) -> str:
    """An HTML table; cells are inserted as given (escape them first), ``numeric`` columns right-aligned."""
    head = "".join(f"<th>{h}</th>" for h in headers) if any(headers) else ""
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f'<table class="cfgzip-table {css}">{thead}<tbody>{"".join(body)}</tbody></table>'


def diagnostic_html(diagnostic: Diagnostic, text: str, *, context: int = 1) -> str:
    """One diagnostic: ``line L, column C: message`` and the lines around it with a caret."""
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
        f'<div class="cfgzip-diag {severity}" data-line="{diagnostic.line}" data-column="{diagnostic.column}">'
        f"<b>line {diagnostic.line}, column {diagnostic.column}</b>: "
        f'<span class="{"cfgzip-bad" if severity == "error" else "cfgzip-warn"}">{severity}</span>: '
        f"{esc(diagnostic.message)}<pre>{code}</pre></div>"
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
