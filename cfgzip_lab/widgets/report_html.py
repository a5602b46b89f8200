"""The workbench's report as one self-contained HTML file (Export ▸ Export report).

A grammar's author sends the report to someone who has no JupyterLab, no Python and maybe no
network: so the file holds everything inline (styles, the railroad diagrams as SVG, no script,
no font, no image, no link to fetch) and opens offline in any browser. It shows the grammar with
syntax highlighting (the EBNF the engines compile; for a schema, a GBNF or a Lark file also what
the author wrote), the tests and their verdicts, a railroad diagram per rule, the class counts,
the timings, and the snippet that uses the exported cache.

Two steps, so the HTML is tested without a session: :func:`report_data` reads a
:class:`~.session.WorkbenchSession` into a :class:`ReportData` (plain values), and
:func:`render_report` writes the HTML of one. No ipywidgets here.
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass, field

__all__ = ["ReportData", "TestRow", "report_data", "render_report", "highlight_ebnf", "MAX_DIAGRAMS"]

MAX_DIAGRAMS = 80  # rules drawn at most (a schema's EBNF has a few hundred; the rest are listed)

# XGrammar's EBNF, token by token: comments, strings, character classes, a rule's definition (a name
# at the start of a line before ::=), names, operators and numbers in {m,n}.
_EBNF_TOKEN = re.compile(
    r"""(?P<comment>\#[^\n]*)
      | (?P<string>"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)
      | (?P<cls>\[(?:\\.|[^\]\\\n])*\]?)
      | (?P<definition>(?m:^[ \t]*)[A-Za-z_][A-Za-z0-9_.\-]*(?=[ \t]*::=))
      | (?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)
      | (?P<operator>::=|[|*+?()])
      | (?P<number>\{[0-9, ]*\})""",
    re.VERBOSE,
)
_CSS_OF = {
    "comment": "c",
    "string": "s",
    "cls": "k",
    "definition": "d",
    "name": "n",
    "operator": "o",
    "number": "m",
}


def highlight_ebnf(text: str) -> str:
    """``text`` as HTML, each token in a ``<span>`` whose class names its kind (``d`` a rule
    defined, ``n`` a rule used, ``s`` a string, ``k`` a character class, ``c`` a comment, ``o``
    an operator, ``m`` a repetition bound); everything else escaped as it is. The tokens'
    texts joined give ``text`` back, so nothing is lost or reordered.

    >>> highlight_ebnf('root ::= "a" x  # hi')
    '<span class="d">root</span> <span class="o">::=</span> <span class="s">&quot;a&quot;</span> <span class="n">x</span>  <span class="c"># hi</span>'
    """
    out, at = [], 0
    for match in _EBNF_TOKEN.finditer(text):
        out.append(html.escape(text[at : match.start()]))
        kind = match.lastgroup
        token = match.group()
        if kind == "definition":  # the indentation before a name is no part of it
            stripped = token.lstrip(" \t")
            out.append(html.escape(token[: len(token) - len(stripped)]))
            token = stripped
        out.append(f'<span class="{_CSS_OF[kind]}">{html.escape(token)}</span>')
        at = match.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class TestRow:
    """One test as the report shows it: ``result`` is ``pass``, ``FAIL`` or ``not run``."""

    text: str
    expect: str
    start: str
    result: str
    detail: str = ""

    __test__ = False


@dataclass
class ReportData:
    """Everything one report shows, as plain values (see :func:`report_data`)."""

    title: str
    created: str
    versions: dict[str, str]
    grammar_text: str
    grammar_kind: str = "ebnf"
    ebnf: str = ""
    diagrams: list[tuple[str, str]] = field(default_factory=list)  # (rule, <svg>)
    rules: int = 0
    tests: list[TestRow] = field(default_factory=list)
    classes: dict = field(default_factory=dict)
    class_sizes: list[tuple[str, int]] = field(default_factory=list)  # (size range, classes)
    timings: dict[str, float] = field(default_factory=dict)
    decode: dict = field(default_factory=dict)
    snippet: str = ""
    grammar_stats: dict = field(default_factory=dict)


def _size_buckets(class_of) -> list[tuple[str, int]]:
    """How many classes hold 1, 2–9, 10–99, 100–999 and 1,000+ tokens."""
    import numpy as np

    sizes = np.bincount(np.asarray(class_of))
    sizes = sizes[sizes > 0]
    edges = [(1, 1, "1 token"), (2, 9, "2–9"), (10, 99, "10–99"), (100, 999, "100–999"), (1000, None, "1,000+")]
    out = []
    for lo, hi, name in edges:
        n = int(((sizes >= lo) & (sizes <= hi)).sum()) if hi is not None else int((sizes >= lo).sum())
        out.append((name, n))
    return out


def report_data(session, *, snippet: str = "") -> ReportData:
    """Read a session into a report: the grammar (compiled if it can be), its tests (run for the
    current grammar when they were not), its rules' diagrams, the classes and the timings."""
    import importlib.metadata
    import platform

    from .._version import __version__

    s = session
    try:
        xgr_version = importlib.metadata.version("xgrammar")
    except importlib.metadata.PackageNotFoundError:
        xgr_version = "not installed"
    data = ReportData(
        title=s.provenance,
        created=time.strftime("%Y-%m-%d %H:%M:%S %z"),
        versions={
            "cfgzip_lab": __version__,
            "xgrammar": xgr_version,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        grammar_text=s.text,
        grammar_kind=s.kind,
        snippet=snippet,
    )
    compiled = s.compiled if s.grammar_ok else None
    if compiled is not None:
        from ..grammar.railroad import rule_svg

        data.ebnf = compiled.text
        data.grammar_stats = compiled.stats()
        data.rules = len(compiled.ast.rules)
        for name, rule in list(compiled.ast.rules.items())[:MAX_DIAGRAMS]:
            data.diagrams.append((name, rule_svg(rule, compiled.ast.text)))
        if s.tests and not (s.is_current(s.tests_stamp) and len(s.test_outcomes) == len(s.tests)):
            s.run_tests()
    current = s.is_current(s.tests_stamp) and len(s.test_outcomes) == len(s.tests)
    for i, test in enumerate(s.tests):
        outcome = s.test_outcomes[i] if current else None
        if outcome is None:
            data.tests.append(TestRow(test.text, test.expect, test.start, "not run", "the grammar has errors"))
        else:
            data.tests.append(
                TestRow(test.text, test.expect, test.start, "pass" if outcome.passed else "FAIL", outcome.describe())
            )
    summary = s.summary()
    if s.classes is not None:
        data.classes = {k: summary.get(k) for k in ("tokenizer", "vocab_size", "classes", "compression_ratio")}
        data.classes.update(
            {k: summary.get(k) for k in ("dead_tokens", "stop_tokens", "special_tokens", "fallback_singletons")}
        )
        data.classes["current"] = s.classes_current
        data.class_sizes = _size_buckets(s.classes.class_of)
    data.timings = dict(s.current_timings())
    from .timings import step_summary

    if s.is_current(getattr(s, "decoder_stamp", None)):
        data.decode = step_summary(s)
    return data


_STYLE = """
:root { color-scheme: light dark; --bg: #fff; --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --panel: #f6f8fa;
  --ok: #1a7f37; --bad: #cf222e; --d: #0550ae; --n: #8250df; --s: #0a3069; --k: #953800; --c: #6e7781; --o: #cf222e; }
@media (prefers-color-scheme: dark) { :root { --bg: #0d1117; --fg: #e6edf3; --muted: #8d96a0; --line: #30363d;
  --panel: #161b22; --ok: #3fb950; --bad: #f85149; --d: #79c0ff; --n: #d2a8ff; --s: #a5d6ff; --k: #ffa657;
  --c: #8b949e; --o: #ff7b72; } }
body { background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; margin-top: 28px; }
.muted { color: var(--muted); } .ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
pre, code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; overflow: auto; }
table { border-collapse: collapse; margin: 6px 0; } th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--panel); } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.fail td { background: color-mix(in srgb, var(--bad) 12%, transparent); }
nav a { margin-right: 12px; color: var(--d); }
.grammar .d { color: var(--d); font-weight: 600; } .grammar .n { color: var(--n); } .grammar .s { color: var(--s); }
.grammar .k { color: var(--k); } .grammar .c { color: var(--c); font-style: italic; } .grammar .o { color: var(--o); }
.grammar .m { color: var(--k); }
.diagram { margin: 10px 0 16px; } .diagram h3 { font: 600 13px ui-monospace, monospace; margin: 0 0 2px; }
.diagram svg { max-width: 100%; height: auto; background: #fff; border-radius: 4px; }
"""


def _esc(value) -> str:
    return html.escape(str(value))


def _num(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return _esc(value if value is not None else "–")


def _ratio(value) -> str:
    return f"{value:,.1f}:1 compression" if isinstance(value, (int, float)) else "–"


def _seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:,.0f} µs"
    if value < 1:
        return f"{value * 1e3:,.1f} ms"
    return f"{value:,.2f} s"


def _rows(head: list[str], rows: list[list[str]], css: list[str] | None = None) -> str:
    cells = "".join(f"<th>{h}</th>" for h in head)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{css[i]}"' if css and css[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _grammar_section(d: ReportData) -> str:
    parts = ['<h2 id="grammar">Grammar</h2>']
    if d.grammar_kind != "ebnf":
        parts.append(
            f'<p class="muted">as written ({_esc(d.grammar_kind)}):</p><pre class="source">{_esc(d.grammar_text)}</pre>'
        )
        if d.ebnf:
            parts.append('<p class="muted">the EBNF XGrammar and cfgzip compile from it:</p>')
    text = d.ebnf or d.grammar_text
    parts.append(f'<pre class="grammar">{highlight_ebnf(text)}</pre>')
    if not d.ebnf:
        parts.append('<p class="bad">the grammar has errors: it was not compiled</p>')
    elif d.grammar_stats:
        stats = ", ".join(f"{_esc(k.replace('_', ' '))} {_num(v)}" for k, v in d.grammar_stats.items())
        parts.append(f'<p class="muted grammar-stats">{stats}</p>')
    return "".join(parts)


def _tests_section(d: ReportData) -> str:
    parts = ['<h2 id="tests">Tests</h2>']
    if not d.tests:
        return parts[0] + '<p class="muted">no tests</p>'
    passed = sum(r.result == "pass" for r in d.tests)
    css = "ok" if passed == len(d.tests) else "bad"
    parts.append(f'<p class="tests-count"><span class="{css}">{passed} of {len(d.tests)} tests pass</span></p>')
    rows, row_css = [], []
    words = {"accept": "should accept", "reject": "should reject", "prefix": "valid prefix"}
    for i, r in enumerate(d.tests, 1):
        verdict = {"pass": '<span class="ok">pass</span>', "FAIL": '<span class="bad">FAIL</span>'}.get(
            r.result, f'<span class="muted">{_esc(r.result)}</span>'
        )
        rows.append(
            [
                str(i),
                words.get(r.expect, _esc(r.expect)),
                f"<code>{_esc(r.text)}</code>",
                _esc(r.start) if r.start else '<span class="muted">root</span>',
                f"{verdict} · {_esc(r.detail)}",
            ]
        )
        row_css.append("fail" if r.result == "FAIL" else "")
    parts.append(_rows(["#", "expect", "string", "from rule", "result"], rows, row_css))
    return "".join(parts)


def _diagrams_section(d: ReportData) -> str:
    parts = ['<h2 id="diagrams">Railroad diagrams</h2>']
    if not d.diagrams:
        return parts[0] + '<p class="muted">none: the grammar did not compile</p>'
    for name, svg in d.diagrams:
        parts.append(f'<div class="diagram" id="rule-{_esc(name)}"><h3>{_esc(name)}</h3>{svg}</div>')
    if d.rules > len(d.diagrams):
        parts.append(f'<p class="muted">the first {len(d.diagrams):,} of {d.rules:,} rules are drawn</p>')
    return "".join(parts)


def _classes_section(d: ReportData) -> str:
    parts = ['<h2 id="classes">Classes</h2>']
    if not d.classes:
        return parts[0] + '<p class="muted">the vocabulary was not classed in this session</p>'
    c = d.classes
    stale = "" if c.get("current", True) else ' <span class="bad">(made for an earlier text of the grammar)</span>'
    parts.append(
        f'<p class="class-count"><b>{_num(c.get("classes"))}</b> classes for {_num(c.get("vocab_size"))} tokens of '
        f"<code>{_esc(c.get('tokenizer'))}</code>: {_ratio(c.get('compression_ratio'))}{stale}</p>"
    )
    kinds = [
        [_esc(k.replace("_", " ")), f'<span class="num">{_num(c.get(k))}</span>']
        for k in ("dead_tokens", "stop_tokens", "special_tokens", "fallback_singletons")
        if c.get(k) is not None
    ]
    if kinds:
        parts.append(_rows(["tokens", "count"], kinds))
    if d.class_sizes:
        parts.append(_rows(["class size", "classes"], [[_esc(k), _num(n)] for k, n in d.class_sizes]))
    return "".join(parts)


def _timings_section(d: ReportData) -> str:
    parts = ['<h2 id="timings">Timings</h2>']
    if not d.timings and not d.decode:
        return parts[0] + '<p class="muted">nothing measured yet</p>'
    if d.timings:
        parts.append(_rows(["what", "time"], [[_esc(k.replace("_", " ")), _seconds(v)] for k, v in d.timings.items()]))
    if d.decode:
        rows = [[_esc(k.replace("_", " ")), _num(v)] for k, v in d.decode.items()]
        parts.append("<p>Decode steps (mask times per step, µs):</p>" + _rows(["", "value"], rows))
    return "".join(parts)


def render_report(d: ReportData) -> str:
    """The report as one HTML document: inline styles and SVG, no script, nothing to fetch."""
    versions = " · ".join(f"{_esc(k)} {_esc(v)}" for k, v in d.versions.items())
    usage = (
        f'<h2 id="usage">Use it in your code</h2><pre class="snippet">{_esc(d.snippet)}</pre>'
        if d.snippet
        else '<h2 id="usage">Use it in your code</h2><p class="muted">export the class cache first</p>'
    )
    nav = "".join(
        f'<a href="#{a}">{t}</a>'
        for a, t in (
            ("grammar", "Grammar"),
            ("tests", "Tests"),
            ("diagrams", "Diagrams"),
            ("classes", "Classes"),
            ("timings", "Timings"),
            ("usage", "Usage"),
        )
    )
    body = "".join(
        [
            f"<h1>cfgzip report: {_esc(d.title)}</h1>",
            f'<p class="muted">{_esc(d.created)} · {versions}</p>',
            f"<nav>{nav}</nav>",
            _grammar_section(d),
            _tests_section(d),
            _diagrams_section(d),
            _classes_section(d),
            _timings_section(d),
            usage,
        ]
    )
    from ..grammar.railroad import DIAGRAM_CSS

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>cfgzip report: {_esc(d.title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_STYLE}{DIAGRAM_CSS}</style></head><body>{body}</body></html>\n"
    )
