"""Where each nonterminal of the byte CFG and of the GNF comes from, in the author's terms.

The lowering invents helper nonterminals (``expr@3`` for a repetition, ``char@1`` for a
character class) and the normal form invents more (one per terminal occurrence, ``S0``,
``expr'`` for left recursion) and then merges equivalent ones. None of those names is in
the grammar text. Every stage therefore records an :class:`Origin` per nonterminal: the
source rule, what kind of construct it stands for, and where that construct is written
(span, line, column, the text itself). The mapping lives on the result objects
(``CFG.origins[name]``, ``GNF.origins[id]``); no symbol is renamed.

>>> from cfgzip_lab.pipeline import compile_grammar
>>> g = compile_grammar('root ::= "a" ("," "a")*\\n')
>>> g.cfg.describe_symbol("root@2")
'the repetition ("," "a")* in rule root (line 1)'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .diagnostics import position_of
from .tree import Span

if TYPE_CHECKING:
    from .cfg import CFG
    from .gnf import GNF

__all__ = [
    "Origin",
    "origin_at",
    "describe_origin",
    "describe_origins",
    "rules_of",
    "RuleSize",
    "rule_sizes",
]

#: What a nonterminal can stand for, in words an author uses.
KINDS = (
    "rule",  # the source rule itself
    "repetition",  # e* / e+ / e{m,}: the loop
    "optional",  # e?
    "bounded repetition",  # e{m,n}: one step of the bounded tail
    "group",  # a parenthesised sequence that is repeated
    "alternation",  # a parenthesised choice inside a sequence
    "character class",  # [...] that needs more than one byte
    "regex",  # one state of a Regex(...)'s automaton
    "tag dispatch",  # one state of a TagDispatch(...)'s free-text automaton
    "substring",  # one state of a Substring(...)'s automaton
    "attribute",  # one state of a rule's automaton under lazy / max_chars
    "terminal",  # one terminal occurrence, lifted by the normal form
    "left recursion",  # the tail the normal form makes out of a left-recursive rule
    "start",  # the normal form's fresh start symbol
)


@dataclass(frozen=True, slots=True)
class Origin:
    """The source construct a nonterminal stands for.

    ``rule`` is the source rule it was written in; ``kind`` one of :data:`KINDS`;
    ``span`` the half-open character range of the construct in the grammar text, with
    its 1-based ``line`` and ``column``; ``excerpt`` the construct's text, shortened.
    """

    rule: str
    kind: str
    span: Span | None = None
    line: int | None = None
    column: int | None = None
    excerpt: str = ""

    def with_kind(self, kind: str) -> Origin:
        return Origin(self.rule, kind, self.span, self.line, self.column, self.excerpt)


def _origin_maker():
    """Origin(rule, kind, span, line, column, excerpt) without the frozen dataclass's ``__init__`` (six
    ``object.__setattr__`` calls): the slots set through their descriptors, the same object (no
    ``__post_init__``), in half the time. The front end makes one per nonterminal and lifted terminal."""
    new = object.__new__
    sets = [Origin.__dict__[name].__set__ for name in ("rule", "kind", "span", "line", "column", "excerpt")]
    set_rule, set_kind, set_span, set_line, set_column, set_excerpt = sets

    def make(rule: str, kind: str, span: Span | None, line: int, column: int, excerpt: str) -> Origin:
        origin = new(Origin)
        set_rule(origin, rule)
        set_kind(origin, kind)
        set_span(origin, span)
        set_line(origin, line)
        set_column(origin, column)
        set_excerpt(origin, excerpt)
        return origin

    return make


_make_origin = _origin_maker()


def origin_at(rule: str, kind: str, span: Span | None, text: str, *, width: int = 40) -> Origin:
    """An :class:`Origin` for the construct at ``span`` of ``text`` (line, column and excerpt filled in)."""
    if span is None or not text:
        return Origin(rule, kind, span)
    start, end = span
    line, column = position_of(text, start)
    excerpt = text[start:end]
    if not excerpt.isprintable() or " " in excerpt:  # (whitespace to collapse; most excerpts have none)
        excerpt = " ".join(excerpt.split())
    if len(excerpt) > width:
        excerpt = excerpt[: width - 1] + "…"
    return _make_origin(rule, kind, span, line, column, excerpt)


def _where(origin: Origin) -> str:
    return f" (line {origin.line})" if origin.line is not None else ""


def describe_origin(origin: Origin) -> str:
    """One phrase an author can read: ``the repetition ("," value)* in rule array (line 5)``."""
    where = _where(origin)
    if origin.kind == "rule":
        return f"rule {origin.rule}{where}"
    if origin.kind == "start":
        return f"the whole grammar (rule {origin.rule})"
    if origin.kind == "left recursion":
        return f"the repeated tail of the left-recursive rule {origin.rule}{where}"
    what = f"{origin.kind} {origin.excerpt}" if origin.excerpt else origin.kind
    return f"the {what} in rule {origin.rule}{where}"


def describe_origins(origins: Iterable[Origin], *, limit: int = 3) -> str:
    """Several origins (a merged nonterminal) as one phrase; the first ``limit`` named."""
    phrases = list(dict.fromkeys(describe_origin(o) for o in origins))
    if not phrases:
        return "no source rule (made by the normal form)"
    shown = phrases[:limit]
    more = f" and {len(phrases) - limit} more" if len(phrases) > limit else ""
    if len(shown) == 1:
        return shown[0] + more
    return ", ".join(shown[:-1]) + (" and " if not more else ", ") + shown[-1] + more


def rules_of(origins: Iterable[Origin]) -> tuple[str, ...]:
    """The source rule names of some origins, each once, in order."""
    return tuple(dict.fromkeys(o.rule for o in origins))


def describe_cfg_symbol(cfg: CFG, name: str) -> str:
    """What the byte-CFG nonterminal ``name`` stands for, e.g. ``expr@3`` → the repetition in rule expr."""
    origin = cfg.origins.get(name)
    if origin is None:
        raise KeyError(f"{name!r} is not a nonterminal of this byte CFG")
    return describe_origin(origin)


def describe_gnf_symbol(gnf: GNF, symbol: int | str) -> str:
    """What GNF nonterminal ``symbol`` (its id, or a name when that name is unique) stands for.

    A member ``F_c`` of a counted repetition (or a displacement's symbolic member of one) is
    described as that repetition with how many items it has read.
    """
    from .counted import (
        INPUT_BASE,
        RELATIVE_BASE,
        is_family_symbol,
        split_family_symbol,
        split_input_symbol,
        split_relative_symbol,
    )

    if isinstance(symbol, int) and symbol >= len(gnf.names) and gnf.families:
        if is_family_symbol(symbol):
            f, c = split_family_symbol(symbol)
            count = f"{c} item{'s' if c != 1 else ''} read"
        elif symbol >= RELATIVE_BASE:
            f, j, lo, hi = split_relative_symbol(symbol)
            count = f"{j} more item{'s' if j != 1 else ''} read"
        elif symbol >= INPUT_BASE:
            f, lo, hi = split_input_symbol(symbol)
            count = f"{lo}..{hi} items read" if lo != hi else f"{lo} items read"
        else:
            raise KeyError(f"GNF symbol {symbol} does not exist")
        family = gnf.families[f]
        return f"{describe_origins(family.origins)} ({count})"
    index = _gnf_index(gnf, symbol)
    merged = gnf.origins[index] if index < len(gnf.origins) else ()
    text = describe_origins(merged)
    if merged and all(o.kind == "terminal" and len(o.excerpt) > 3 and o.excerpt[0] == '"' for o in merged):
        text = f"{gnf.names[index]} of " + text  # which byte of a longer literal
    return text


def _gnf_index(gnf: GNF, symbol: int | str) -> int:
    if isinstance(symbol, int):
        if not 0 <= symbol < gnf.num_nonterminals:
            raise KeyError(f"GNF nonterminal {symbol} does not exist (0..{gnf.num_nonterminals - 1})")
        return symbol
    hits = [i for i, n in enumerate(gnf.names) if n == symbol]
    if not hits:
        raise KeyError(f"{symbol!r} is not a GNF nonterminal name")
    if len(hits) > 1:
        raise KeyError(f"{symbol!r} names {len(hits)} GNF nonterminals (one per terminal occurrence): pass the id")
    return hits[0]


@dataclass(frozen=True, slots=True)
class RuleSize:
    """How big one source rule is at each stage: the answer to "which rules make GNF grow?".

    A GNF nonterminal merged from several rules counts for each of them, so the GNF
    columns may add up to more than the grammar's totals.
    """

    rule: str
    line: int | None
    cfg_nonterminals: int
    cfg_productions: int
    gnf_nonterminals: int
    gnf_productions: int  # listed productions A → [bytes] B1..Bn of its nonterminals

    @property
    def growth(self) -> float:
        """GNF productions per byte-CFG production (how much the normal form multiplied it)."""
        return self.gnf_productions / max(1, self.cfg_productions)


def rule_sizes(cfg: CFG, gnf: GNF) -> list[RuleSize]:
    """Per source rule: byte-CFG and GNF sizes, largest GNF first (ties in source order)."""
    lines: dict[str, int | None] = {}
    cfg_nts: dict[str, int] = {}
    cfg_prods: dict[str, int] = {}
    for name, alts in cfg.rules.items():
        origin = cfg.origins.get(name)
        rule = origin.rule if origin else name
        if origin is not None and origin.kind == "rule":
            lines[rule] = origin.line
        lines.setdefault(rule, None)
        cfg_nts[rule] = cfg_nts.get(rule, 0) + 1
        cfg_prods[rule] = cfg_prods.get(rule, 0) + len(alts)
    gnf_nts: dict[str, int] = {}
    gnf_prods: dict[str, int] = {}
    for a, row in enumerate(gnf.table):
        listed = sum(gnf.store.count(tail) for tail in set(row.values()))
        for rule in rules_of(gnf.origins[a] if a < len(gnf.origins) else ()):
            gnf_nts[rule] = gnf_nts.get(rule, 0) + 1
            gnf_prods[rule] = gnf_prods.get(rule, 0) + listed
    order = list(lines)
    out = [
        RuleSize(
            rule,
            lines[rule],
            cfg_nts.get(rule, 0),
            cfg_prods.get(rule, 0),
            gnf_nts.get(rule, 0),
            gnf_prods.get(rule, 0),
        )
        for rule in order
    ]
    position = {r: i for i, r in enumerate(order)}
    return sorted(out, key=lambda s: (-s.gnf_productions, position[s.rule]))
