"""A parse tree as HTML: drawn as an SVG (:func:`tree_svg`, laid out by
:mod:`cfgzip_lab.grammar.tree_layout`), with the same tree as text below it in nested
``<details>``; each node carries its span for the hover highlight of :class:`~.html_view.HtmlView`
and its rule name as a link to the definition. A node with children has a fold badge (``−``, or
``+N`` for the N nodes folded under it): a click sends the ``fold`` action with the node's path,
and :class:`ParseTreeView` draws the tree again with that node flipped.

The sample sits above the tree (``data-sample``); a node carries ``data-span="start,end"`` in
code points. Runs of one character class (``[0-9]`` matched as 1, 2, 3) are shown as one leaf
(``[0-9] ×3``). Open nodes of a rejected sample (the derivation stopped inside them) are marked.
At most :data:`MAX_NODES` nodes are drawn; the levels below :data:`OPEN_DEPTH` start folded.
"""

from __future__ import annotations

from collections.abc import Callable

from ..grammar.earley import ParseNode, ParseResult, describe_expected
from ..grammar.tree_layout import MAX_NODES, OPEN_DEPTH, TreeLayout, layout_tree
from ..grammar.tree_layout import merged_children as _merged
from ..grammar.tree_layout import preview as _preview
from ._format import esc, rule_links

__all__ = ["tree_html", "tree_svg", "ParseTreeView", "MAX_NODES", "OPEN_DEPTH"]


def tree_svg(layout: TreeLayout) -> str:
    """The SVG of a laid-out tree: a box per node (``data-span`` for the hover mark, the rule name
    a ``data-rule`` link), an elbow from each parent to each child, and a fold badge on each node
    with children (``data-action="fold"``, ``data-arg`` its path). Colours are the theme's CSS
    variables (``_format.CSS``), so it follows JupyterLab Dark."""
    parts = [
        f'<svg class="cfgzip-tree-svg" xmlns="http://www.w3.org/2000/svg" width="{layout.width + 24:.0f}" '
        f'height="{layout.height + 16:.0f}" viewBox="-12 -8 {layout.width + 24:.0f} {layout.height + 16:.0f}" '
        'font-family="var(--jp-code-font-family, monospace)" font-size="12">'
    ]
    for parent, child in layout.edges():
        y0, y1 = parent.y + parent.height, child.y
        mid = (y0 + y1) / 2
        parts.append(
            f'<path class="cfgzip-tree-edge" d="M{parent.center:.1f},{y0:.1f} V{mid:.1f} H{child.center:.1f} V{y1:.1f}"/>'
        )
    for box in layout.boxes:
        css = ["cfgzip-tree-node", f"cfgzip-tree-{box.kind}"]
        if not box.complete:
            css.append("cfgzip-tree-open")
        if box.folded:
            css.append("cfgzip-tree-folded")
        label = esc(box.label)
        if box.kind == "rule":
            label = f'<tspan data-rule="{esc(box.label)}" class="cfgzip-tree-rule">{label}</tspan>'
        cx = box.width / 2
        parts.append(
            f'<g class="{" ".join(css)}" data-span="{box.start},{box.end}" data-path="{box.path}" '
            f'transform="translate({box.x:.1f},{box.y:.1f})">'
            f"<title>{esc(box.label)} {esc(box.text)} (characters {box.start}–{box.end})</title>"
            f'<rect width="{box.width:.1f}" height="{box.height:.1f}" rx="4"/>'
            f'<text x="{cx:.1f}" y="14" text-anchor="middle">{label}</text>'
            f'<text class="cfgzip-tree-text" x="{cx:.1f}" y="29" text-anchor="middle">{esc(box.text)}</text>'
        )
        if box.children:
            badge = f"+{box.below:,}" if box.folded else "−"
            width = 8 + 7 * len(badge)
            what = f"unfold: {box.below:,} nodes below" if box.folded else "fold this node"
            parts.append(
                f'<g class="cfgzip-tree-toggle" data-action="fold" data-arg="{box.path}" '
                f'transform="translate({cx - width / 2:.1f},{box.height - 6:.1f})"><title>{what}</title>'
                f'<rect width="{width}" height="13" rx="6"/>'
                f'<text x="{width / 2:.1f}" y="10" text-anchor="middle" font-size="10">{badge}</text></g>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def tree_html(
    result: ParseResult,
    *,
    title: str = "sample",
    pointer: Callable[[str], str | None] | None = None,
    toggled: frozenset[str] | set[str] = frozenset(),
) -> str:
    """The HTML of one parse (accepted: its derivation; otherwise the partial one, with what the
    grammar expected where it stopped): the drawn tree, then the same tree as text.
    ``pointer(rule)``: a JSON pointer to show beside a rule. ``toggled``: paths of the nodes whose
    fold state the author flipped (see :mod:`~cfgzip_lab.grammar.tree_layout`)."""
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
    parts = [
        f"<b>Parse tree of {esc(title)}</b> · {head} (hover a node: its text is marked in the sample; "
        "− and +N fold and unfold)"
    ]
    parts.append(f'<pre class="cfgzip-code cfgzip-tree-sample" data-sample>{esc(sample)}</pre>')
    if result.ambiguity is not None:
        parts.append(f'<p class="cfgzip-warn cfgzip-ambiguous">⚠ {esc(result.ambiguity.describe(sample))}</p>')
    words = describe_expected(result.expected, result.expected_rules, can_end=result.can_end)
    if result.kind != "accepted":
        parts.append(f'<p class="cfgzip-expected-terms">{rule_links(esc(words))} (there)</p>')
    if result.tree is not None:
        layout = layout_tree(result.tree, sample, toggled=toggled)
        parts.append(f'<div class="cfgzip-tree-canvas">{tree_svg(layout)}</div>')
        if layout.hidden:
            parts.append(f'<p class="cfgzip-muted">the first {MAX_NODES:,} nodes are drawn</p>')
        parts.append(
            '<details class="cfgzip-tree-as-text"><summary>the same tree as text</summary>'
            f"{node_html(result.tree, 0)}</details>"
        )
    if result.kind == "accepted" and result.expected:
        # below the tree and muted: for a complete sample it is what may follow, not an error (35.7)
        parts.append(
            f'<p class="cfgzip-muted cfgzip-could-go-on">complete; it could also go on: {rule_links(esc(words))}</p>'
        )
    if budget[0] <= 0:
        parts.append(f'<p class="cfgzip-muted">the first {MAX_NODES:,} nodes are shown</p>')
    return f'<div class="cfgzip-tree" data-sample-root>{"".join(parts)}</div>'


class ParseTreeView:
    """A parse tree shown in an :class:`~.html_view.HtmlView`, with its fold state: a click on a
    node's badge (the ``fold`` action) flips that node and draws the tree again. The state belongs
    to one sample: showing another text starts from the default folds."""

    def __init__(self, view, *, pointer: Callable[[str], str | None] | None = None, on_error=None) -> None:
        self.view = view
        self.pointer = pointer
        self.result: ParseResult | None = None
        self.title = ""
        self.toggled: set[str] = set()
        self._on_error = on_error
        view.on_action("fold", self._on_fold)

    def show(self, result: ParseResult, title: str) -> None:
        if self.result is None or self.result.sample != result.sample:
            self.toggled = set()
        self.result, self.title = result, title
        self.draw()

    def clear(self) -> None:
        self.result, self.toggled = None, set()
        self.view.value = ""

    def toggle(self, path: str) -> None:
        """Fold or unfold the node at ``path`` (``"0.2"``; ``""`` the top)."""
        if self.result is None:
            return
        self.toggled ^= {path}
        self.draw()

    def draw(self) -> None:
        if self.result is not None:
            self.view.value = tree_html(self.result, title=self.title, pointer=self.pointer, toggled=self.toggled)

    def _on_fold(self, arg: str) -> None:
        try:
            self.toggle(arg)
        except Exception as exc:  # a front-end message: the error goes to the panel's box, never lost
            if self._on_error is None:
                raise
            self._on_error(exc)
