"""Where each node of a parse tree is drawn: a layered ("tidy") layout for the workbench's SVG tree.

Pure geometry over :class:`~.earley.ParseNode`, no widgets and no SVG: the view
(``cfgzip_lab.widgets._tree``) turns the boxes and edges into SVG and this module stays testable
on its own. Each node is a box holding two lines: its label (the rule name, or the literal or
class as written) and the text it matched (``«…»``, cut at :data:`PREVIEW_CHARS`). Boxes are
sized by their longest line in a monospace font (``char_width`` per character).

The layout, in two passes (the simple form of Reingold and Tilford's tidy tree: no subtree is
slid under a neighbour's, so the widths add up, but no two boxes ever overlap, which a reader of a
derivation cares about more than a compact picture)::

    width(n)  = max(box(n), sum(width(c) for c in children(n)) + GAP * (k - 1))
    place(n, left, depth): children side by side from the left of the block they fill, the
        block centred in width(n); n centred over the block; y = depth * LEVEL

A node is *folded* (its children not drawn, a ``+N`` badge says how many nodes hide below) when
its depth is :data:`OPEN_DEPTH` or more, as the text tree folds ``<details>``, unless it is an
open node of a rejected sample (where the derivation stopped: always shown). ``toggled`` names
the nodes whose state the author flipped by clicking, by their *path* (child indices from the
top, ``"0.2.1"``; the top is ``""``), so the view keeps them across redraws of one sample.
Runs of one character class matched one code point at a time (``[0-9]`` as 1, 2, 3) are one
box (``[0-9] ×3``), as in the text tree. At most ``max_nodes`` boxes are laid out; ``hidden``
counts the rest.

>>> from cfgzip_lab.grammar.earley import EarleyGrammar
>>> from cfgzip_lab.grammar.ebnf import parse_ebnf
>>> g = EarleyGrammar(parse_ebnf('root ::= "turn " turn\\nturn ::= "left" | "right"\\n'))
>>> layout = layout_tree(g.parse("turn left").tree, "turn left")
>>> [(b.path, b.label) for b in layout.boxes]
[('', 'root'), ('0', '"turn "'), ('1', 'turn'), ('1.0', '"left"')]
"""

from __future__ import annotations

from dataclasses import dataclass

from .earley import ParseNode

__all__ = ["Box", "TreeLayout", "layout_tree", "merged_children", "preview", "OPEN_DEPTH", "MAX_NODES"]

OPEN_DEPTH = 4  # levels drawn open; deeper rule nodes start folded
MAX_NODES = 1500  # boxes laid out at most (a long sample's tree stays a picture, not a wall)
PREVIEW_CHARS = 24
GAP = 12.0  # between two sibling subtrees
LEVEL = 58.0  # from one level's top to the next's
PAD = 8.0  # inside a box, left and right
LINE = 15.0  # one text line


# control characters as their escapes; everything else (quotes and backslashes included) as typed
_VISIBLE = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"} | {
    c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A, 0x0D)
}


def preview(text: str, width: int = 40) -> str:
    """A node's text between « », as it is in the sample: a JSON string ``"Mum's \\"best\\""`` reads
    as written, not through Python's repr (issue 35.7); only control characters are escaped, so a
    newline shows as ``\\n``. Longer than ``width``: cut with …."""
    shown = text if len(text) <= width else text[: width - 1] + "…"
    return f"«{shown.translate(_VISIBLE)}»"


def merged_children(children: tuple[ParseNode, ...]) -> list[tuple[ParseNode, int, int]]:
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


@dataclass(frozen=True, slots=True)
class Box:
    """One drawn node: ``x``, ``y`` its top-left corner, ``label`` and ``text`` its two lines.

    ``path``: child indices from the top (``"0.2"``), what a click on its fold badge sends back.
    ``kind``: the node's (``rule``, ``literal``, ``class``, ``pattern``). ``count``: the matches a
    merged run of one class stands for (1 otherwise). ``children``: how many it has (drawn or
    not); ``folded``: they are not drawn, ``below``: the nodes under it then hidden.
    ``complete``: False for a node a rejected or unfinished sample left open.
    """

    path: str
    parent: str | None
    label: str
    text: str
    kind: str
    start: int
    end: int
    x: float
    y: float
    width: float
    height: float
    depth: int
    count: int = 1
    children: int = 0
    folded: bool = False
    below: int = 0
    complete: bool = True

    @property
    def center(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True, slots=True)
class TreeLayout:
    """The boxes in drawing order (a parent before its children), the canvas size, and
    ``hidden``: nodes past ``max_nodes`` that were not laid out."""

    boxes: list[Box]
    width: float
    height: float
    hidden: int = 0

    def box(self, path: str) -> Box:
        return next(b for b in self.boxes if b.path == path)

    def edges(self) -> list[tuple[Box, Box]]:
        """(parent, child) for every drawn child."""
        by_path = {b.path: b for b in self.boxes}
        return [(by_path[b.parent], b) for b in self.boxes if b.parent is not None]


@dataclass(slots=True)
class _Item:
    node: ParseNode
    path: str
    depth: int
    label: str
    text: str
    end: int
    count: int
    kids: list[_Item]
    folded: bool
    below: int
    box_w: float = 0.0
    span_w: float = 0.0


def _size(node: ParseNode) -> int:
    """Boxes ``node`` and its descendants make when all unfolded (a run of one class is one)."""
    if node.kind != "rule":
        return 1 + sum(_size(c) for c in node.children)
    return 1 + sum(_size(c) if count == 1 else 1 for c, _, count in merged_children(node.children))


def layout_tree(
    node: ParseNode,
    sample: str,
    *,
    toggled: frozenset[str] | set[str] = frozenset(),
    open_depth: int = OPEN_DEPTH,
    max_nodes: int = MAX_NODES,
    char_width: float = 7.0,
) -> TreeLayout:
    """Lay out the tree under ``node`` (the derivation of ``sample``); see the module doc."""
    budget = [max_nodes]
    hidden = [0]

    def build(n: ParseNode, path: str, depth: int, end: int, count: int) -> _Item | None:
        if budget[0] <= 0:
            hidden[0] += _size(n) if count == 1 else 1
            return None
        budget[0] -= 1
        label = n.label if count == 1 else f"{n.label} ×{count}"
        text = preview(sample[n.start : end], PREVIEW_CHARS)
        merged = merged_children(n.children) if n.kind == "rule" else [(c, c.end, 1) for c in n.children]
        default_folded = depth >= open_depth and n.complete and bool(merged)
        folded = default_folded != (path in toggled) if merged else False
        item = _Item(n, path, depth, label, text, end, count, [], folded, 0)
        if folded:
            item.below = _size(n) - 1
        else:
            for i, (child, child_end, child_count) in enumerate(merged):
                kid = build(child, f"{path}.{i}" if path else str(i), depth + 1, child_end, child_count)
                if kid is not None:  # None: past the budget (counted in hidden)
                    item.kids.append(kid)
        item.box_w = PAD * 2 + char_width * max(len(label), len(text), 3)
        return item

    top = build(node, "", 0, node.end, 1)
    assert top is not None  # max_nodes >= 1

    def measure(item: _Item) -> float:
        block = sum(measure(k) for k in item.kids) + GAP * max(len(item.kids) - 1, 0)
        item.span_w = max(item.box_w, block)
        return item.span_w

    measure(top)
    boxes: list[Box] = []
    height = 2 * LINE + 8

    def place(item: _Item, left: float, parent: str | None) -> None:
        n = item.node
        boxes.append(
            Box(
                item.path,
                parent,
                item.label,
                item.text,
                n.kind,
                n.start,
                item.end,
                left + (item.span_w - item.box_w) / 2,
                item.depth * LEVEL,
                item.box_w,
                height,
                item.depth,
                item.count,
                len(merged_children(n.children)) if n.kind == "rule" else len(n.children),
                item.folded,
                item.below,
                n.complete,
            )
        )
        block = sum(k.span_w for k in item.kids) + GAP * max(len(item.kids) - 1, 0)
        x = left + (item.span_w - block) / 2
        for kid in item.kids:
            place(kid, x, item.path)
            x += kid.span_w + GAP

    place(top, 0.0, None)
    depth = max(b.depth for b in boxes)
    return TreeLayout(boxes, top.span_w, depth * LEVEL + height, hidden[0])
