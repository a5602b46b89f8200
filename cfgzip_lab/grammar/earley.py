"""Earley parses of a sample over the source rules: the derivation in the author's own terms.

The GNF and XGrammar say *whether* a sample is in the language; an author also wants *how*
(ANTLR Lab and the Lark IDE show a parse tree): which rule matched which part of the text,
and, for a rejected sample, how far the derivation got and what it expected there, as the
literals and rules of the grammar ("expected "left" or "right" (rule turn, line 3)"), not as a
byte set. This module parses the sample with an Earley parser that runs directly on the AST
the EBNF front end built (:mod:`.tree`), code point by code point, so every node carries the
rule name, the span in the sample and the span of the construct in the grammar text.

Why not lark's Earley (lark is a dependency already): it needs the grammar rewritten into
lark's syntax (rule names with ``.`` and ``-``, character classes as regex terminals, bounded
repetitions it expands), and on a rejected input it raises without the chart, so there is no
partial tree to show; here the chart is ours, and the failure, the partial derivation and the
expected terminals all come from it.

The parse runs over the sample's UTF-8 bytes, as XGrammar and the GNF do: a literal is its
bytes, a character class takes one whole code point (1 to 4 bytes) in one scan, and a
``Regex(...)``, ``TagDispatch`` or other :class:`~.tree.Automaton` runs its own byte edges (an
edge labelled with an expression, a rule for TagDispatch, is a symbol like any other). So the
longest viable prefix is the GNF's to the byte; nodes report their spans in code points.

The algorithm (Earley 1970; the empty-rule fix of Aycock and Horspool 2002 done dynamically:
an item that starts waiting on a symbol which already completed empty at that position is
advanced at once)::

    items are (symbol, alternative, dot, origin); set k holds the items after k bytes
    predict  B at k:   add (B, a, 0, k) for every alternative a of B
    scan     (A, a, d, o) waiting on a terminal that matches the bytes at k (one byte, or the
             code point starting there) -> (A, a, d', o) in set k + its length
    complete (B, a, end, o) in set k: every (A, a', d, o') in set o waiting on B -> (A, a', d', o') in set k

where ``d'`` is the next dot: ``d + 1`` in a sequence, the next count in a repetition, the
target state of the edge in an automaton.

Each item keeps its back links ``(start of the last child, previous dot, child)``: a derivation
is read back from them, and an item with two links (or a completed symbol with two final items)
is an ambiguity: two derivations of the same span.

Repetitions are not unrolled: ``e{m,n}`` is one loop symbol whose "dot" counts the iterations
done (capped at ``m`` when there is no upper bound, since more make no difference), so ``{0,
2147483647}`` costs what the sample needs, not what the bound says. An iteration must consume
something (an empty one adds nothing to the language and would loop). Groups and repetitions
are transparent in the tree: their children belong to the rule that wrote them.

Every parse is bounded by ``max_items`` items and back links together (:class:`ParseLimitError`
past it, a CfgzipError; items alone, 400,000 of them, measured 5 s and +297 MB on a deliberately
ambiguous sample; items and links, 250,000, 1.0 s and +73 MB), and by :data:`MAX_DEPTH` nested rules when a tree is read back. The
sample's language is the GNF's (rule lookaheads are dropped, as everywhere in cfgzip), which the
tests compare on every bundled grammar's samples and generated sentences.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import CfgzipError
from . import tree
from .diagnostics import position_of
from .lower import complement, normalize

__all__ = [
    "EarleyGrammar",
    "ParseNode",
    "ParseResult",
    "Expected",
    "Ambiguity",
    "ParseLimitError",
    "parse_sample",
    "describe_expected",
    "MAX_ITEMS",
]

MAX_ITEMS = 250_000  # Earley items and back links per parse (measured at the limit: 1.0 s, +73 MB)
MAX_DEPTH = 4_000  # nested rules in one derivation (a 4,000-character right-recursive string)


class ParseLimitError(CfgzipError, ValueError):
    """A parse that would exceed its budget (a long or very ambiguous sample)."""


@dataclass(frozen=True, slots=True)
class ParseNode:
    """One node of a derivation: a source rule, or a literal / character class it matched.

    ``start``/``end``: code-point offsets in the sample (half open). ``source``: the span in
    the grammar text (the rule's definition, the literal or class as written). ``complete`` is
    False for the nodes a rejected or unfinished sample left open (and for a literal matched
    only in part). ``label``: the rule name, or the terminal as written (``"left"``, ``[0-9]``).
    """

    label: str
    kind: str  # "rule", "literal", "class", "pattern" (a Regex, TagDispatch, …: an automaton)
    start: int
    end: int
    children: tuple[ParseNode, ...] = ()
    source: tuple[int, int] | None = None
    complete: bool = True

    def text(self, sample: str) -> str:
        return sample[self.start : self.end]

    def walk(self) -> Iterator[ParseNode]:
        """This node and every node below it, depth first, left to right."""
        yield self
        for child in self.children:
            yield from child.walk()

    def rules(self) -> list[str]:
        return [n.label for n in self.walk() if n.kind == "rule"]

    def bracketed(self, sample: str) -> str:
        """``turn[left]`` style text of the tree: rules with brackets, terminals as matched."""
        if self.kind != "rule":
            return sample[self.start : self.end]
        inner = " ".join(c.bracketed(sample) for c in self.children)
        return f"{self.label}[{inner}{'' if self.complete else ' …'}]"


@dataclass(frozen=True, slots=True)
class Expected:
    """A terminal the parse could take where it stopped: as written in the grammar, in which
    rule (and line), and how much of it was already matched (``"left"`` after ``lef``)."""

    text: str
    kind: str  # "literal", "class", "pattern" or "token" (Token(...)/ExcludeToken(...): no text matches it)
    rule: str
    line: int
    column: int
    source: tuple[int, int] | None
    matched: str = ""  # the part of the literal matched before the stop

    def describe(self) -> str:
        return self.text if not self.matched else f"{self.text} (after {self.matched!r})"


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """Two derivations of one span: ``rule`` (the rule that wrote the ambiguous construct)
    matches ``sample[start:end]`` as ``first`` and as ``second``."""

    rule: str
    start: int
    end: int
    first: ParseNode
    second: ParseNode
    what: str = ""  # "rule ws" / "a group in rule expr" / "the repetition in rule list"

    def describe(self, sample: str) -> str:
        return (
            f"ambiguous: {self.what or 'rule ' + self.rule} matches {sample[self.start : self.end]!r} in two ways: "
            f"{self.first.bracketed(sample)}  and  {self.second.bracketed(sample)}"
        )


@dataclass
class ParseResult:
    """One sample's Earley parse.

    ``accepted``: the whole sample derives from the root. ``position``: code points matched
    (the whole sample unless rejected). ``tree``: the derivation (accepted), else the partial
    derivation up to ``position`` with its open nodes. ``expected``: the terminals that could
    come at ``position`` (empty when accepted and nothing may follow); ``expected_rules``: the
    source rules that could start there; ``can_end``: the sample may end at ``position``.
    ``ambiguity``: two derivations of one span, when the sample has them. ``items``: Earley
    items made (the cost).
    """

    sample: str
    accepted: bool
    position: int
    tree: ParseNode | None
    expected: list[Expected] = field(default_factory=list)
    expected_rules: list[tuple[str, int]] = field(default_factory=list)  # (rule, line)
    can_end: bool = False
    ambiguity: Ambiguity | None = None
    items: int = 0

    @property
    def kind(self) -> str:
        if self.accepted:
            return "accepted"
        return "prefix" if self.position == len(self.sample) else "rejected"

    @property
    def line_column(self) -> tuple[int, int]:
        return position_of(self.sample, self.position)


def describe_expected(
    expected: list[Expected], expected_rules: list[tuple[str, int]] = (), *, can_end: bool = False, limit: int = 8
) -> str:
    """``expected "left" or "right" (rule turn, line 3)``: the terminals grouped by the rule that
    wrote them, then the rules that could start here, then "or the end of the input"."""
    groups: dict[tuple[str, int], list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for e in expected:
        if (e.rule, e.describe()) in seen:
            continue
        seen.add((e.rule, e.describe()))
        groups.setdefault((e.rule, e.line), []).append(e.describe())
    parts = []
    for (rule, line), texts in list(groups.items())[:limit]:
        shown = texts if len(texts) <= limit else texts[: limit - 1] + [f"{len(texts) - limit + 1} more"]
        parts.append(f"{_or(shown)} (rule {rule}, line {line})")
    if len(groups) > limit:
        parts.append(f"{len(groups) - limit} more rules")
    own = {rule for rule, _ in groups}
    starts = [f"{rule} (line {line})" for rule, line in expected_rules if rule not in own]
    if starts:
        parts.append("a " + ("rule" if len(starts) == 1 else "rule among") + " " + _or(starts[:limit]))
    if can_end:
        parts.append("the end of the input")
    return "expected " + _or(parts) if parts else "nothing can come here"


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


# -- the grammar, compiled for Earley -------------------------------------------------------


@dataclass(slots=True)
class _Terminal:
    """What one scan takes: a byte in ``ranges`` (``unit="byte"``: a literal's byte, an automaton
    edge), or a whole UTF-8 code point in ``ranges`` (``unit="code point"``: a character class)."""

    ranges: tuple[tuple[int, int], ...]  # sorted inclusive ranges
    lows: tuple[int, ...]
    node: tree.Expr  # the Literal, CharClass, Automaton or TokenSet (no ranges: no byte) it comes from
    index: int  # the byte's position in its literal
    rule: str
    unit: str = "byte"

    def matches(self, value: int) -> bool:
        i = bisect.bisect_right(self.lows, value) - 1
        return i >= 0 and value <= self.ranges[i][1]


@dataclass(slots=True)
class _Symbol:
    kind: str  # "rule", "group", "loop", "automaton"
    rule: str  # the source rule it is written in (its own name for a rule)
    alternatives: list[tuple[int, ...]] = field(default_factory=list)  # elements: >= 0 symbol, < 0 ~terminal
    item: int = 0  # loops: the repeated element
    min: int = 0
    max: int | None = None
    item_nullable: bool = False
    span: tuple[int, int] | None = None
    nullable: bool = False
    # automata: the edges leaving each state, (element, target state), and the final states
    edges: list[list[tuple[int, int]]] = field(default_factory=list)
    finals: frozenset[int] = frozenset()
    start: int = 0
    label: str = ""  # how a tree shows it: Regex("...") as written, or its pattern


def _decode_at(data: bytes, k: int) -> tuple[int, int] | None:
    """(code point, length) of the UTF-8 sequence at ``data[k]`` (surrogates allowed, as XGrammar
    matches their 3-byte form); None for a byte that starts no code point."""
    b0 = data[k]
    if b0 < 0x80:
        return b0, 1
    if 0xC2 <= b0 <= 0xDF:
        n, cp, lo = 2, b0 & 0x1F, 0x80
    elif 0xE0 <= b0 <= 0xEF:
        n, cp, lo = 3, b0 & 0x0F, 0xA0 if b0 == 0xE0 else 0x80
    elif 0xF0 <= b0 <= 0xF4:
        n, cp, lo = 4, b0 & 0x07, 0x90 if b0 == 0xF0 else 0x80
    else:
        return None
    if k + n > len(data):
        return None
    hi = 0x8F if b0 == 0xF4 else 0xBF
    for i in range(1, n):
        b = data[k + i]
        if not (lo if i == 1 else 0x80) <= b <= (hi if i == 1 else 0xBF):
            return None
        cp = (cp << 6) | (b & 0x3F)
    return cp, n


class EarleyGrammar:
    """The source rules of one :class:`~.tree.GrammarAST`, ready to parse samples.

    >>> from cfgzip_lab.grammar.ebnf import parse_ebnf
    >>> g = EarleyGrammar(parse_ebnf('root ::= "turn " turn\\nturn ::= "left" | "right"\\n'))
    >>> g.parse("turn left").tree.bracketed("turn left")
    'root[turn  turn[left]]'
    >>> from cfgzip_lab.grammar.earley import describe_expected
    >>> r = g.parse("turn up")
    >>> describe_expected(r.expected, r.expected_rules)
    'expected "left" or "right" (rule turn, line 2)'

    Raises
    ------
    CfgzipError
        For a construct the parser does not know (a newer AST node).
    """

    def __init__(self, ast: tree.GrammarAST) -> None:
        self.ast = ast
        self.text = ast.text
        self.symbols: list[_Symbol] = []
        self.terminals: list[_Terminal] = []
        self.rule_ids: dict[str, int] = {}
        self._automata: dict[int, int] = {}  # id(Automaton node) -> symbol (a node met twice is one symbol)
        for name, rule in ast.rules.items():
            self.rule_ids[name] = self._new(_Symbol("rule", name, span=rule.span))
        for name, rule in ast.rules.items():
            sym = self.symbols[self.rule_ids[name]]
            options = rule.body.options if isinstance(rule.body, tree.Choice) else (rule.body,)
            sym.alternatives = [tuple(self._elements(o, name)) for o in options]
        self._nullables()
        self.root = self.rule_ids[ast.root]

    # -- compiling ----------------------------------------------------------------------

    def _new(self, sym: _Symbol) -> int:
        self.symbols.append(sym)
        return len(self.symbols) - 1

    def _terminal(self, ranges, node, index: int, rule: str, unit: str = "byte") -> int:
        ranges = tuple(ranges)
        self.terminals.append(_Terminal(ranges, tuple(lo for lo, _ in ranges), node, index, rule, unit))
        return ~(len(self.terminals) - 1)

    def _written(self, node) -> str | None:
        span = getattr(node, "span", None)
        return self.text[span[0] : span[1]] if span and self.text else None

    def _elements(self, e: tree.Expr, rule: str) -> list[int]:
        if isinstance(e, tree.Literal):
            data = e.text.encode("utf-8", "surrogatepass")
            return [self._terminal(((b, b),), e, i, rule) for i, b in enumerate(data)]
        if isinstance(e, tree.CharClass):
            ranges = normalize(e.ranges)
            ranges = complement(tuple(ranges)) if e.negated else ranges
            return [self._terminal(ranges, e, 0, rule, "code point")]
        if isinstance(e, tree.RuleRef):
            if e.name not in self.rule_ids:
                raise CfgzipError(f"undefined rule {e.name!r} in rule {rule}")
            return [self.rule_ids[e.name]]
        if isinstance(e, tree.Sequence):
            return [x for item in e.items for x in self._elements(item, rule)]
        if isinstance(e, tree.Choice):
            group = self._new(_Symbol("group", rule, span=e.span))
            self.symbols[group].alternatives = [tuple(self._elements(o, rule)) for o in e.options]
            return [group]
        if isinstance(e, tree.Repeat):
            return [self._new(_Symbol("loop", rule, item=self._one(e.item, rule), min=e.min, max=e.max, span=e.span))]
        automaton = getattr(tree, "Automaton", None)
        if automaton is not None and isinstance(e, automaton):
            return [self._automaton(e, rule)]
        if isinstance(e, tree.TokenSet):
            # Token(...)/ExcludeToken(...) name whole tokens by id; a text sample has no token ids,
            # so no byte scans it (as the GNF: its token atom is reached by no byte). It still
            # shows where a parse stopped ("expected Token(5)").
            return [self._terminal((), e, 0, rule)]
        raise CfgzipError(f"parse trees do not support {type(e).__name__} (in rule {rule}) yet")

    def _one(self, e: tree.Expr, rule: str) -> int:
        """One element for ``e`` (a group around a sequence of several)."""
        inner = self._elements(e, rule)
        if len(inner) == 1:
            return inner[0]
        return self._new(_Symbol("group", rule, span=getattr(e, "span", None), alternatives=[tuple(inner)]))

    def _automaton(self, e, rule: str) -> int:
        if id(e) in self._automata:
            return self._automata[id(e)]
        written = self._written(e)
        label = (
            written if written and not written.startswith(("[", '"')) and "(" in written else e.pattern or "automaton"
        )
        sym_id = self._new(
            _Symbol("automaton", rule, span=e.span, start=e.start, finals=frozenset(e.finals), label=label)
        )
        self._automata[id(e)] = sym_id
        edges: list[list[tuple[int, int]]] = [[] for _ in range(e.num_states)]
        for source, edge_label, target in e.edges:
            if isinstance(edge_label, tuple):
                edges[source].append((self._terminal((edge_label,), e, 0, rule), target))
            else:
                edges[source].append((self._one(edge_label, rule), target))
        self.symbols[sym_id].edges = edges
        return sym_id

    def _nullables(self) -> None:
        def null(el: int) -> bool:
            return el >= 0 and self.symbols[el].nullable

        changed = True
        while changed:
            changed = False
            for sym in self.symbols:
                if sym.nullable:
                    continue
                if sym.kind == "loop":
                    now = sym.min == 0 or null(sym.item)
                elif sym.kind == "automaton":
                    seen, todo, now = {sym.start}, [sym.start], False
                    while todo and not now:
                        q = todo.pop()
                        now = q in sym.finals
                        for el, target in sym.edges[q]:
                            if null(el) and target not in seen:
                                seen.add(target)
                                todo.append(target)
                else:
                    now = any(all(null(x) for x in alt) for alt in sym.alternatives)
                if now:
                    sym.nullable = changed = True
        for sym in self.symbols:
            if sym.kind == "loop":
                sym.item_nullable = null(sym.item)

    # -- parsing ------------------------------------------------------------------------

    def parse(self, sample: str, *, max_items: int = MAX_ITEMS, start: str | None = None) -> ParseResult:
        """Parse ``sample`` (its UTF-8 bytes, surrogates as XGrammar encodes them) from the root, or
        from rule ``start`` (a sample of one rule: the tree's top is that rule).

        Raises
        ------
        CfgzipError
            ``start`` names no rule of the grammar.
        """
        if start is None or start == self.ast.root:
            root = self.root
        elif start in self.rule_ids:
            root = self.rule_ids[start]
        else:
            raise CfgzipError(f"no rule {start!r} to parse from")
        return _Parse(self, sample, max_items, root).run()

    def line_of(self, span: tuple[int, int] | None) -> tuple[int, int]:
        return position_of(self.text, span[0]) if span and self.text else (0, 0)


def parse_sample(ast: tree.GrammarAST, sample: str, *, max_items: int = MAX_ITEMS) -> ParseResult:
    """One-off :meth:`EarleyGrammar.parse` (build the grammar once to parse many samples)."""
    return EarleyGrammar(ast).parse(sample, max_items=max_items)


class _Cycle(Exception):
    """A derivation choice that would loop (a unit cycle); another one is tried."""


class _Set:
    __slots__ = ("links", "order", "waiting", "scans", "completed", "predicted")

    def __init__(self) -> None:
        self.links: dict[tuple, dict] = {}  # item -> {(child start, previous dot, child): None}
        self.order: list[tuple] = []
        self.waiting: dict[int, list[tuple[tuple, int]]] = {}  # symbol -> [(item, its next dot)]
        self.scans: list[tuple[tuple, int, int]] = []  # (item, terminal index, next dot)
        self.completed: dict[tuple[int, int], list[tuple]] = {}  # (symbol, origin) -> final items
        self.predicted: set[int] = set()


class _Parse:
    def __init__(self, grammar: EarleyGrammar, sample: str, max_items: int, root: int | None = None) -> None:
        self.g = grammar
        self.root = grammar.root if root is None else root  # the start symbol of this parse
        self.sample = sample
        self.data = sample.encode("utf-8", "surrogatepass")
        n = len(self.data)
        # code points wholly before each byte offset (an offset inside a character: the characters
        # before that one), to report spans as the sample's str indices
        self.cp_at = [0] * (n + 1)
        leads = 0
        for i, b in enumerate(self.data):
            continuation = b & 0xC0 == 0x80
            self.cp_at[i] = leads - 1 if continuation else leads
            leads += not continuation
        self.cp_at[n] = leads
        self.max_items = max_items
        self.count = 0
        self.sets: list[_Set | None] = [None] * (n + 1)
        self.sets[0] = _Set()
        self.memo: dict[tuple[int, int, int], list[ParseNode]] = {}

    def cp(self, offset: int) -> int:
        return self.cp_at[offset]

    # -- the chart ----------------------------------------------------------------------

    def set_at(self, k: int) -> _Set:
        s = self.sets[k]
        if s is None:
            s = self.sets[k] = _Set()
        return s

    def add(self, k: int, item: tuple, link: tuple | None) -> None:
        s = self.set_at(k)
        links = s.links.get(item)
        if links is None:
            self.count += 1
            if self.count > self.max_items:
                raise ParseLimitError(
                    f"the parse tree of this sample needs more than {self.max_items:,} Earley items "
                    f"({len(self.sample):,} characters; a long or very ambiguous sample)"
                )
            s.links[item] = {link: None} if link is not None else {}
            s.order.append(item)
        elif link is not None and link not in links:
            self.count += 1  # links cost memory like items: both count against the budget
            if self.count > self.max_items:
                raise ParseLimitError(
                    f"the parse tree of this sample needs more than {self.max_items:,} Earley items "
                    f"({len(self.sample):,} characters; a long or very ambiguous sample)"
                )
            links[link] = None

    def predict(self, k: int, sym_id: int) -> None:
        s = self.sets[k]
        if sym_id in s.predicted:
            return
        s.predicted.add(sym_id)
        sym = self.g.symbols[sym_id]
        if sym.kind == "loop":
            self.add(k, (sym_id, 0, 0, k), None)
        elif sym.kind == "automaton":
            self.add(k, (sym_id, 0, sym.start, k), None)
        else:
            for a in range(len(sym.alternatives)):
                self.add(k, (sym_id, a, 0, k), None)

    def next_dot(self, sym: _Symbol, dot: int) -> int:
        if sym.kind == "loop" and sym.max is None:
            return min(dot + 1, sym.min)
        return dot + 1

    def advance(self, item: tuple, next_dot: int, child: int, start: int, k: int) -> None:
        """``item`` (in set ``start``) moves over ``child``, which spans ``start``..``k``."""
        if start == k and self.g.symbols[item[0]].kind == "loop":
            return  # an empty iteration adds nothing
        self.add(k, (item[0], item[1], next_dot, item[3]), (start, item[2], child))

    def expect(self, k: int, item: tuple, element: int, next_dot: int) -> None:
        s = self.sets[k]
        if element < 0:
            s.scans.append((item, ~element, next_dot))
            return
        s.waiting.setdefault(element, []).append((item, next_dot))
        self.predict(k, element)
        if (element, k) in s.completed:  # it completed empty here already (Aycock-Horspool)
            self.advance(item, next_dot, element, k, k)

    def complete(self, k: int, item: tuple) -> None:
        s = self.sets[k]
        key = (item[0], item[3])
        finals = s.completed.get(key)
        if finals is not None:
            finals.append(item)  # another derivation of the same span
            return
        s.completed[key] = [item]
        for waiting, next_dot in list(self.sets[item[3]].waiting.get(item[0], ())):
            self.advance(waiting, next_dot, item[0], item[3], k)

    def close(self, k: int) -> None:
        s = self.sets[k]
        symbols = self.g.symbols
        i = 0
        while i < len(s.order):
            item = s.order[i]
            i += 1
            sym = symbols[item[0]]
            dot = item[2]
            if sym.kind == "loop":
                if dot >= sym.min or sym.item_nullable:
                    self.complete(k, item)
                if sym.max is None or dot < sym.max:
                    self.expect(k, item, sym.item, self.next_dot(sym, dot))
            elif sym.kind == "automaton":
                if dot in sym.finals:
                    self.complete(k, item)
                for element, target in sym.edges[dot]:
                    self.expect(k, item, element, target)
            else:
                alt = sym.alternatives[item[1]]
                if dot == len(alt):
                    self.complete(k, item)
                else:
                    self.expect(k, item, alt[dot], dot + 1)

    def scan(self, k: int) -> None:
        data, terminals = self.data, self.g.terminals
        byte = data[k]
        point = None
        for item, t, next_dot in self.sets[k].scans:
            term = terminals[t]
            if term.unit == "byte":
                if term.matches(byte):
                    self.add(k + 1, (item[0], item[1], next_dot, item[3]), (k, item[2], ~t))
                continue
            if point is None:
                point = _decode_at(data, k) or (-1, 0)
            if point[1] and term.matches(point[0]):
                self.add(k + point[1], (item[0], item[1], next_dot, item[3]), (k, item[2], ~t))

    def run(self) -> ParseResult:
        n = len(self.data)
        self.predict(0, self.root)
        last = 0  # the furthest set with items: how far the sample fits
        for k in range(n + 1):
            s = self.sets[k]
            if s is None or not s.order:
                if k > last and not any(self.sets[j] is not None for j in range(k, min(n, k + 4) + 1)):
                    break  # nothing reaches past here (a code point is at most 4 bytes)
                continue
            last = k
            self.close(k)
            if k < n and s.scans:
                self.scan(k)
        root_done = (self.root, 0) in self.sets[last].completed
        accepted = last == n and root_done
        result = ParseResult(self.sample, accepted, self.cp(last), None, can_end=root_done, items=self.count)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 1000))  # derivations nest a few frames per rule
        try:
            if accepted:
                (tree_node,) = self.build(self.root, 0, n, set(), 0)
                result.tree = self.in_code_points(tree_node)
                result.ambiguity = self.find_ambiguity(n)
            else:
                partial = self.partial(last)
                result.tree = self.in_code_points(partial) if partial is not None else None
            result.expected, result.expected_rules = self.expected(last)
        except _Cycle:  # pragma: no cover - every completed span has an acyclic derivation
            result.tree = None
        finally:
            sys.setrecursionlimit(limit)
        return result

    def in_code_points(self, node: ParseNode) -> ParseNode:
        """``node`` with its spans (bytes while it was built) in code points of the sample."""
        children = tuple(self.in_code_points(c) for c in node.children)
        return ParseNode(
            node.label, node.kind, self.cp(node.start), self.cp(node.end), children, node.source, node.complete
        )

    # -- reading derivations back ------------------------------------------------------------

    def build(self, sym_id: int, start: int, end: int, stack: set, depth: int, choice=None) -> list[ParseNode]:
        """The nodes ``sym_id`` contributes over ``start``..``end``: one node for a rule or an
        automaton, the spliced children for a group or a loop. ``choice``: (final index, (item,
        set) where to take the second link) for the second derivation of an ambiguity."""
        key = (sym_id, start, end)
        if choice is None and key in self.memo:
            return self.memo[key]
        if key in stack:
            raise _Cycle
        if depth > MAX_DEPTH:
            raise ParseLimitError(f"this sample's derivation nests more than {MAX_DEPTH:,} rules deep")
        stack.add(key)
        try:
            finals = self.sets[end].completed[(sym_id, start)]
            order = [finals[choice[0]]] if choice is not None else finals
            for final in order:
                try:
                    children = self.chain(final, end, stack, depth, choice[1] if choice else None)
                    break
                except _Cycle:
                    continue
            else:
                raise _Cycle
        finally:
            stack.discard(key)
        sym = self.g.symbols[sym_id]
        if sym.kind == "rule":
            nodes = [ParseNode(sym.rule, "rule", start, end, tuple(children), sym.span)]
        elif sym.kind == "automaton":  # its bytes are one leaf; rules it dispatches to stay inside
            nodes = [ParseNode(sym.label, "pattern", start, end, tuple(children), sym.span)]
        else:
            nodes = children
        if choice is None:
            self.memo[key] = nodes
        return nodes

    def chain(self, item: tuple, k: int, stack: set, depth: int, branch=None) -> list[ParseNode]:
        """The children of ``item`` (in set ``k``), left to right, read from its back links."""
        parts: list[list[ParseNode]] = []
        cur, ck = item, k
        while True:
            links = self.sets[ck].links[cur]
            if not links:
                break
            options = list(links)
            if branch is not None and branch == (cur, ck) and len(options) > 1:
                options = options[1:]
            chosen = None
            for link in options:  # (start of the child, the dot before it, the child)
                try:
                    parts.append(self.child(link[2], link[0], ck, stack, depth))
                except _Cycle:
                    continue
                chosen = link
                break
            if chosen is None:
                raise _Cycle
            cur, ck = (cur[0], cur[1], chosen[1], cur[3]), chosen[0]
        return _merge_literals([node for part in reversed(parts) for node in part])

    def child(self, child: int, start: int, end: int, stack: set, depth: int) -> list[ParseNode]:
        if child < 0:
            if isinstance(self.g.terminals[~child].node, (tree.Literal, tree.CharClass)):
                return [self.leaf(~child, start, end)]
            return []  # an automaton's own bytes: the automaton's node covers them
        return self.build(child, start, end, stack, depth + 1)

    def leaf(self, t: int, start: int, end: int, *, complete: bool = True) -> ParseNode:
        term = self.g.terminals[t]
        node = term.node
        written = self.g._written(node)
        if isinstance(node, tree.Literal):
            label = written if written and written.startswith('"') else _quote(node.text)
            # ``literal_id`` identifies the literal; ``index`` lets _merge_literals glue its bytes
            return _Leaf(label, "literal", start, end, (), node.span, complete, id(node), term.index)
        label = written if written and written.startswith("[") else "[…]"
        return ParseNode(label, "class", start, end, (), node.span, complete)

    # -- ambiguity -----------------------------------------------------------------------

    def find_ambiguity(self, n: int, budget: int = 20_000) -> Ambiguity | None:
        """The outermost span of the derivation with two derivations, if any (breadth first
        from the root, at most ``budget`` spans visited)."""
        todo = [(self.root, 0, n)]
        seen = {todo[0]}
        for key in todo:
            if len(seen) > budget:
                return None
            sym_id, start, end = key
            finals = self.sets[end].completed[key[0], key[1]]
            branch = None
            children: list[tuple[int, int, int]] = []
            for final in finals:
                cur, ck = final, end
                while True:
                    links = self.sets[ck].links[cur]
                    if not links:
                        break
                    if len(links) > 1 and branch is None:
                        branch = (cur, ck)
                    for s0, _, child in links:
                        if child >= 0:
                            children.append((child, s0, ck))
                    s0, prev_dot, _ = next(iter(links))
                    cur, ck = (cur[0], cur[1], prev_dot, cur[3]), s0
            if len(finals) > 1 or branch is not None:
                found = self.ambiguity_at(key, finals, branch)
                if found is not None:
                    return found
            for c in children:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return None

    def ambiguity_at(self, key, finals, branch) -> Ambiguity | None:
        sym_id, start, end = key
        try:
            first = self.build(sym_id, start, end, set(), 0, choice=(0, None))
            second_choice = (1, None) if len(finals) > 1 else (0, branch)
            second = self.build(sym_id, start, end, set(), 0, choice=second_choice)
        except _Cycle:
            return None
        sym = self.g.symbols[sym_id]

        def wrap(nodes):
            if len(nodes) == 1 and nodes[0].kind in ("rule", "pattern"):
                return nodes[0]
            return ParseNode(sym.rule, "rule", start, end, tuple(nodes), sym.span)

        a, b = self.in_code_points(wrap(first)), self.in_code_points(wrap(second))
        if _shape(a) == _shape(b):
            return None  # the same tree (a cycle through an empty span): not two readings
        what = {
            "rule": f"rule {sym.rule}",
            "group": f"a group in rule {sym.rule}",
            "loop": f"a repetition in rule {sym.rule}",
            "automaton": f"{sym.label} in rule {sym.rule}",
        }[sym.kind]
        return Ambiguity(sym.rule, a.start, a.end, a, b, what)

    # -- a rejected sample -------------------------------------------------------------------

    def expected(self, k: int) -> tuple[list[Expected], list[tuple[str, int]]]:
        s = self.sets[k]
        out: list[Expected] = []
        seen: set = set()
        for _item, t, _next in s.scans:
            term = self.g.terminals[t]
            node = term.node
            line, column = self.g.line_of(node.span)
            written = self.g._written(node)
            if isinstance(node, tree.Literal):
                text = written if written and written.startswith('"') else _quote(node.text)
                matched = node.text.encode("utf-8", "surrogatepass")[: term.index].decode("utf-8", "ignore")
                out.append(Expected(text, "literal", term.rule, line, column, node.span, matched))
            elif isinstance(node, tree.CharClass):
                out.append(
                    Expected(
                        written if written and written.startswith("[") else "[…]",
                        "class",
                        term.rule,
                        line,
                        column,
                        node.span,
                    )
                )
            elif isinstance(node, tree.TokenSet):
                if id(node) not in seen:
                    seen.add(id(node))
                    text = f"{'ExcludeToken' if node.exclude else 'Token'}({', '.join(map(str, node.ids))})"
                    out.append(Expected(text, "token", term.rule, line, column, node.span))
            else:  # an automaton's byte: the pattern, once
                sym = self.g.symbols[self.g._automata[id(node)]]
                if id(node) not in seen:
                    seen.add(id(node))
                    out.append(Expected(sym.label, "pattern", term.rule, line, column, node.span))
        rules = []
        for sym_id in s.predicted:
            sym = self.g.symbols[sym_id]
            if sym.kind == "rule":
                rules.append((sym.rule, self.g.line_of(sym.span)[0]))
        rules.sort(key=lambda r: (r[1], r[0]))
        return out, rules

    def partial(self, k: int) -> ParseNode | None:
        """The derivation as far as it got: from the root down to an item that waits for a
        terminal at ``k`` (the most advanced one), every level with its finished children."""
        s = self.sets[k]
        terminals = self.g.terminals
        if s.scans:
            # the derivation that got furthest into what it expects: a literal matched in part
            # first ("turn" at "tu"), then the innermost (latest origin)
            start_item, t, _ = max(s.scans, key=lambda st: (terminals[st[1]].index > 0, st[0][3], st[0][2]))
            half = terminals[t].index > 0 and isinstance(terminals[t].node, tree.Literal)
        elif s.order:
            start_item, half = max(s.order, key=lambda it: (it[3], it[2])), False
        else:
            return None
        chain = self.ancestors(start_item, k)
        if chain is None:  # pragma: no cover - every item descends from a root prediction
            return None
        open_nodes: list[ParseNode] = []
        for level, (item, ck) in enumerate(chain):  # the innermost item first, then its ancestors
            try:
                children = self.chain(item, ck, set(), 0)
            except _Cycle:  # pragma: no cover
                children = []
            if level == 0 and half and children and isinstance(children[-1], _Leaf):
                last = children[-1]
                children[-1] = _Leaf(
                    last.label, last.kind, last.start, last.end, (), last.source, False, last.literal_id, last.index
                )
            children = children + open_nodes
            sym = self.g.symbols[item[0]]
            if sym.kind == "rule":
                open_nodes = [ParseNode(sym.rule, "rule", item[3], k, tuple(children), sym.span, complete=False)]
            elif sym.kind == "automaton":
                open_nodes = [ParseNode(sym.label, "pattern", item[3], k, tuple(children), sym.span, complete=False)]
            else:
                open_nodes = children
        return open_nodes[0] if len(open_nodes) == 1 and open_nodes[0].kind == "rule" else None

    def ancestors(self, item: tuple, k: int) -> list[tuple[tuple, int]] | None:
        """``item`` (in set ``k``) and the items that predicted its symbol, up to the root, as
        (item, set) pairs: a breadth-first search over "waits for my symbol at my origin"."""
        start = (item, k)
        parent: dict[tuple, tuple | None] = {start: None}
        todo = [start]
        for node in todo:
            it, _ck = node
            if it[0] == self.root and it[3] == 0:
                path = []
                while node is not None:
                    path.append(node)
                    node = parent[node]
                return path[::-1]  # the inner item first, the root item last
            origin = it[3]
            for up, _next in self.sets[origin].waiting.get(it[0], ()):
                nxt = (up, origin)
                if nxt not in parent:
                    parent[nxt] = node
                    todo.append(nxt)
        return None


@dataclass(frozen=True, slots=True)
class _Leaf(ParseNode):
    literal_id: int = 0
    index: int = 0


def _merge_literals(nodes: list[ParseNode]) -> list[ParseNode]:
    """Glue the bytes of one literal occurrence (``"left"`` matched as l, e, f, t) into one leaf."""
    out: list[ParseNode] = []
    for node in nodes:
        prev = out[-1] if out else None
        if (
            isinstance(node, _Leaf)
            and isinstance(prev, _Leaf)
            and prev.literal_id == node.literal_id
            and node.index == prev.index + (prev.end - prev.start)
            and prev.end == node.start
        ):
            out[-1] = _Leaf(
                prev.label, "literal", prev.start, node.end, (), prev.source, node.complete, prev.literal_id, prev.index
            )
        else:
            out.append(node)
    return out


def _shape(node: ParseNode):
    return (node.label, node.kind, node.start, node.end, node.source, tuple(_shape(c) for c in node.children))


def _quote(text: str) -> str:
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
