"""A parse tree as HTML: nested ``<details>`` (collapsible), each node with its span for the
hover highlight of :class:`~.html_view.HtmlView` and its rule name as a link to the definition.

The sample sits above the tree (``data-sample``); a node carries ``data-span="start,end"`` in
code points. Runs of one character class (``[0-9]`` matched as 1, 2, 3) are shown as one leaf
(``[0-9] ×3``). Open nodes of a rejected sample (the derivation stopped inside them) are marked.
At most :data:`MAX_NODES` nodes are drawn; the levels below :data:`OPEN_DEPTH` start folded.
"""

from __future__ import annotations

from collections.abc import Callable

from ..grammar.earley import ParseNode, ParseResult, describe_expected
from ._format import esc, rule_links

__all__ = ["tree_html", "MAX_NODES", "OPEN_DEPTH"]

MAX_NODES = 1500
OPEN_DEPTH = 4


# control characters as their escapes; everything else (quotes and backslashes included) as typed
_VISIBLE = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"} | {
    c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A, 0x0D)
}


def _preview(text: str, width: int = 40) -> str:
    """A node's text between « », as it is in the sample: a JSON string ``"Mum's \\"best\\""`` reads
    as written, not through Python's repr (issue 35.7: ``'"Mum\\'s \\\\"best\\\\""'``); only control
    characters are escaped, so a newline shows as ``\\n``."""
    shown = text if len(text) <= width else text[: width - 1] + "…"
    return f"«{shown.translate(_VISIBLE)}»"


def _merged(children: tuple[ParseNode, ...]) -> list[tuple[ParseNode, int, int]]:
    """Children with runs of one class (same source span, adjacent) folded: (node, end, count)."""
    out: list[tuple[ParseNode, int, int]] = []
    for child in children:
        if out and child.kind == "class" and out[-1][0].kind == "class" and out[-1][0].source == child.source:
            node, end, count = out[-1]
            if end == child.start:
                out[-1] = (node, child.end, count + 1)
                continue
        out.append((child, child.end, 1))
    return out


def tree_html(result: ParseResult, *, title: str = "sample", pointer: Callable[[str], str | None] | None = None) -> str:
    """The HTML of one parse (accepted: its derivation; otherwise the partial one, with what the
    grammar expected where it stopped). ``pointer(rule)``: a JSON pointer to show beside a rule."""
    sample = result.sample
    budget = [MAX_NODES]

    def rule_label(name: str) -> str:
        where = pointer(name) if pointer is not None else None
        extra = f' <span class="cfgzip-muted">{esc(where)}</span>' if where and not where.startswith("(") else ""
        return f'<b data-rule="{esc(name)}" title="go to rule {esc(name)}">{esc(name)}</b>{extra}'

    def node_html(node: ParseNode, depth: int) -> str:
        if budget[0] <= 0:
            return ""
        budget[0] -= 1
        text = node.text(sample)
        if node.kind == "pattern" and node.children:  # a TagDispatch: the rules it dispatched to, inside
            inner = "".join(node_html(child, depth + 1) for child in node.children)
            return (
                f'<details open><summary><span class="cfgzip-node" data-span="{node.start},{node.end}">'
                f'<span class="cfgzip-code">{esc(node.label)}</span> {esc(_preview(text))}</span></summary>{inner}</details>'
            )
        if node.kind != "rule":
            matched = esc(_preview(text))
            state = "" if node.complete else ' <span class="cfgzip-open">(only this much matched)</span>'
            return (
                f'<span class="cfgzip-leaf" data-span="{node.start},{node.end}">'
                f'<span class="cfgzip-code">{esc(node.label)}</span> ← {matched}{state}</span>'
            )
        inner = []
        for child, end, count in _merged(node.children):
            if count > 1:
                budget[0] -= 1
                inner.append(
                    f'<span class="cfgzip-leaf" data-span="{child.start},{end}"><span class="cfgzip-code">'
                    f"{esc(child.label)}</span> ×{count} ← {esc(_preview(sample[child.start : end]))}</span>"
                )
            else:
                inner.append(node_html(child, depth + 1))
        state = "" if node.complete else ' <span class="cfgzip-open">… stopped here</span>'
        opened = " open" if depth < OPEN_DEPTH or not node.complete else ""
        return (
            f'<details{opened}><summary><span class="cfgzip-node" data-span="{node.start},{node.end}">'
            f"{rule_label(node.label)} {esc(_preview(text))}{state}</span></summary>{''.join(inner)}</details>"
        )

    head = {
        "accepted": '<span class="cfgzip-ok">accepted</span>: the derivation in the grammar\'s rules',
        "prefix": '<span class="cfgzip-warn">valid prefix</span>: the derivation so far',
        "rejected": '<span class="cfgzip-bad">rejected</span> at line {}, column {}: the derivation up to there',
    }[result.kind]
    if result.kind == "rejected":
        head = head.format(*result.line_column)
    parts = [f"<b>Parse tree of {esc(title)}</b> · {head} (hover a node: its text is marked in the sample)"]
    parts.append(f'<pre class="cfgzip-code cfgzip-tree-sample" data-sample>{esc(sample)}</pre>')
    if result.ambiguity is not None:
        parts.append(f'<p class="cfgzip-warn cfgzip-ambiguous">⚠ {esc(result.ambiguity.describe(sample))}</p>')
    words = describe_expected(result.expected, result.expected_rules, can_end=result.can_end)
    if result.kind != "accepted":
        parts.append(f'<p class="cfgzip-expected-terms">{rule_links(esc(words))} (there)</p>')
    if result.tree is not None:
        parts.append(node_html(result.tree, 0))
    if result.kind == "accepted" and result.expected:
        # below the tree and muted: for a complete sample it is what may follow, not an error (35.7)
        parts.append(
            f'<p class="cfgzip-muted cfgzip-could-go-on">complete; it could also go on: {rule_links(esc(words))}</p>'
        )
    if budget[0] <= 0:
        parts.append(f'<p class="cfgzip-muted">the first {MAX_NODES:,} nodes are shown</p>')
    return f'<div class="cfgzip-tree" data-sample-root>{"".join(parts)}</div>'
