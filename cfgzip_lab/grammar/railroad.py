"""Railroad (syntax) diagrams of the source rules, drawn as SVG by the ``railroad-diagrams`` package.

One diagram per rule, straight from the AST, so it shows what the author wrote (before
lowering): strings and character classes as terminals (rounded boxes), rule references
as nonterminals (square boxes, titled ``rule NAME``), ``|`` as branches, ``* + ?``
as loops and bypasses, ``{m,n}`` as a loop with its bounds written under it.
"""

from __future__ import annotations

import io

from ..extras import require_extra
from . import tree

require_extra("workbench", "railroad diagrams (cfgzip_lab.grammar.railroad)", modules=("railroad",))
import railroad as rr  # noqa: E402

__all__ = ["rule_diagram", "rule_svg", "grammar_svgs", "expr_diagram", "DIAGRAM_CSS"]

#: The package's stylesheet, scoped to the diagrams, with lighter boxes; put it once on a page.
DIAGRAM_CSS = rr.DEFAULT_STYLE.replace("stroke-width:3", "stroke-width:2").replace(
    "hsl(120,100%,90%)", "hsl(210,60%,94%)"
)

_WIDE = 6  # a sequence of more items is stacked in rows of this many


def _literal_text(text: str) -> str:
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def _source(e: tree.Expr, text: str) -> str | None:
    return text[e.span[0] : e.span[1]] if text and e.span is not None else None


def expr_diagram(e: tree.Expr, text: str = "") -> rr.DiagramItem:
    """The railroad item of one expression; ``text`` (the grammar) lets classes show as written."""
    if isinstance(e, tree.Literal):
        return rr.Skip() if not e.text else rr.Terminal(_literal_text(e.text))
    if isinstance(e, tree.CharClass):
        written = _source(e, text)
        return rr.Terminal(written if written and written.startswith("[") else "[…]", cls="char-class")
    if isinstance(e, tree.RuleRef):
        return rr.NonTerminal(e.name, title=f"rule {e.name}")
    if isinstance(e, tree.Sequence):
        items = [expr_diagram(i, text) for i in e.items]
        if len(items) > _WIDE:
            return rr.Stack(*(rr.Sequence(*items[i : i + _WIDE]) for i in range(0, len(items), _WIDE)))
        return rr.Sequence(*items)
    if isinstance(e, tree.Choice):
        return rr.Choice(0, *(expr_diagram(o, text) for o in e.options))
    if isinstance(e, tree.Repeat):
        item = expr_diagram(e.item, text)
        low, high = e.min, e.max
        if (low, high) == (0, None):
            return rr.ZeroOrMore(item)
        if (low, high) == (1, None):
            return rr.OneOrMore(item)
        if (low, high) == (0, 1):
            return rr.Optional(item)
        bounds = f"{low}+ times" if high is None else f"{low} times" if low == high else f"{low} to {high} times"
        loop = rr.OneOrMore(item, rr.Comment(bounds))
        return rr.Optional(loop) if low == 0 else loop
    if isinstance(e, tree.Automaton):  # a Regex(...): shown as written
        written = _source(e, text)
        shown = written and written.startswith(("Regex", "TagDispatch", "Substring"))
        return rr.Terminal(written if shown else f"/{e.pattern}/", cls="regex")
    if isinstance(e, tree.TokenSet):  # a whole token by id, as XGrammar prints it
        ids = ", ".join(map(str, e.ids[:6])) + (", …" if len(e.ids) > 6 else "")
        return rr.Terminal(f"{'ExcludeToken' if e.exclude else 'Token'}({ids})", cls="token")
    raise TypeError(f"unknown grammar node {e!r}")


def rule_diagram(rule: tree.Rule, text: str = "") -> rr.Diagram:
    """The railroad diagram of one source rule."""
    return rr.Diagram(expr_diagram(rule.body, text))


def rule_svg(rule: tree.Rule, text: str = "") -> str:
    """One rule's diagram as an inline ``<svg>`` element (style with :data:`DIAGRAM_CSS`)."""
    out = io.StringIO()
    rule_diagram(rule, text).writeSvg(out.write)
    return out.getvalue()


def grammar_svgs(ast: tree.GrammarAST) -> dict[str, str]:
    """Every rule's SVG, in source order."""
    return {name: rule_svg(rule, ast.text) for name, rule in ast.rules.items()}
