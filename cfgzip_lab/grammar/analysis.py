"""NULLABLE and FIRST sets of the source rules, and the bytes a grammar expects next.

Both answer an author's questions in the grammar's own terms: "can this rule match
nothing?", "which characters can start it?", "which rules can it start with?" (its left
corners: a rule among its own left corners is left-recursive), and, for a rejected
sample, "what would have been allowed at that point?". The sets are computed on the AST
(code points, as the author wrote them), not on the byte CFG.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import tree
from .cfg import BYTE_BITS, ByteSet
from .lower import MAX_CODE_POINT, complement, normalize
from .words import EMPTY

__all__ = ["RuleSets", "analyse", "format_code_points", "expected_bytes", "describe_bytes"]

CodePoints = tuple[tuple[int, int], ...]  # sorted, merged, inclusive code-point ranges


@dataclass(frozen=True, slots=True)
class RuleSets:
    """One source rule's NULLABLE flag, FIRST set (code points) and left corners (rule names)."""

    name: str
    nullable: bool
    first: CodePoints
    left_corners: tuple[str, ...]

    @property
    def left_recursive(self) -> bool:
        return self.name in self.left_corners


def _union(a: CodePoints, b: CodePoints) -> CodePoints:
    return tuple(normalize(a + b)) if b else a


def automaton_first(a: tree.Automaton) -> CodePoints:
    """The code points a ``Regex`` automaton can start with, read from its byte edges.

    An ASCII byte is its code point; a lead byte with the second byte's range gives a block
    of code points (exact for two-byte characters; for longer ones every third and fourth
    byte is assumed, a superset). Sub-expression edges (a counted repetition) contribute
    their own first code points, and are looked past while they can match nothing.
    """
    out: list[tuple[int, int]] = []
    succ: dict[int, list] = {}
    for source, label, target in a.edges:
        succ.setdefault(source, []).append((label, target))
    seen, todo = {a.start}, [a.start]
    while todo:
        for label, target in succ.get(todo.pop(), ()):
            if not isinstance(label, tuple):
                item = label.item if isinstance(label, tree.Repeat) else label
                out += automaton_first(item) if isinstance(item, tree.Automaton) else ()
                if _nullable_label(label) and target not in seen:
                    seen.add(target)
                    todo.append(target)
                continue
            lo, hi = label
            if lo <= 0x7F:
                out.append((lo, min(hi, 0x7F)))
            for lead in range(max(lo, 0xC0), min(hi, 0xF7) + 1):
                width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                shift = 6 * (width - 1)
                base = (lead & (0xFF >> (width + 1))) << shift
                for second, _ in succ.get(target, ()):
                    if isinstance(second, tuple):
                        # only continuation bytes continue a character (a TagDispatch's default
                        # edges span all bytes): a reversed range (lo > hi, from the & 0x3F or
                        # from past U+10FFFF) is one normalize() never merges, so FIRST grew
                        # every round (analyse on a two-tool structural tag ran for minutes)
                        lo2, hi2 = max(second[0], 0x80), min(second[1], 0xBF)
                        if lo2 > hi2 or (base | (lo2 & 0x3F) << (shift - 6)) > MAX_CODE_POINT:
                            continue  # lead bytes 0xF5-0xF7 start no code point either
                        first = base | (lo2 & 0x3F) << (shift - 6)
                        last = base | (hi2 & 0x3F) << (shift - 6) | ((1 << (shift - 6)) - 1)
                        out.append((first, min(last, MAX_CODE_POINT)))
    return tuple(normalize(out))


def _nullable_label(label: tree.Expr) -> bool:
    if isinstance(label, tree.Repeat):
        return label.min == 0 or _nullable_label(label.item)
    return isinstance(label, tree.Automaton) and label.nullable()


def analyse(ast: tree.GrammarAST) -> dict[str, RuleSets]:
    """NULLABLE, FIRST and left corners of every rule of ``ast``, in source order.

    A least fixpoint, in the shape of lark's ``GrammarAnalyzer.calculate_sets``::

        NULLABLE := {};  FIRST[r] := {};  CORNERS[r] := {}      for every rule r
        repeat until nothing changes:
            for every rule  r ::= e:
                if nullable(e):  add r to NULLABLE
                FIRST[r]   ∪= first(e)
                CORNERS[r] ∪= corners(e) ∪ CORNERS[B] for each B in corners(e)

        where, by the shape of e:
            ""  / "abc"      nullable iff empty;  first = {'a'};        corners = {}
            [...] / [^...]   not nullable;        first = its code points
            B (a rule)       nullable iff B ∈ NULLABLE;  first = FIRST[B];  corners = {B}
            e1 e2 … en       nullable iff all are;  first/corners = those of e1,
                             and of e(i+1) while e1 … ei are all nullable
            e1 | … | en      nullable iff one is;  first/corners = the union
            e{m,n}           nullable iff m = 0 or e is;  first/corners = those of e

    Every set only grows and is bounded, so the loop ends.
    """
    nullable: set[str] = set()
    first: dict[str, CodePoints] = {name: () for name in ast.rules}
    corners: dict[str, set[str]] = {name: set() for name in ast.rules}

    def visit(e: tree.Expr) -> tuple[bool, CodePoints, set[str]]:
        if isinstance(e, tree.Literal):
            if not e.text:
                return True, (), set()
            cp = ord(e.text[0])
            return False, ((cp, cp),), set()
        if isinstance(e, tree.CharClass):
            ranges = normalize(e.ranges)
            return False, tuple(complement(tuple(ranges)) if e.negated else ranges), set()
        if isinstance(e, tree.RuleRef):
            return e.name in nullable, first.get(e.name, ()), {e.name}
        if isinstance(e, tree.Sequence):
            acc: CodePoints = ()
            refs: set[str] = set()
            for item in e.items:
                n, f, c = visit(item)
                acc, refs = _union(acc, f), refs | c
                if not n:
                    return False, acc, refs
            return True, acc, refs
        if isinstance(e, tree.Choice):
            any_null, acc, refs = False, (), set()
            for option in e.options:
                n, f, c = visit(option)
                any_null, acc, refs = any_null or n, _union(acc, f), refs | c
            return any_null, acc, refs
        if isinstance(e, tree.Repeat):
            n, f, c = visit(e.item)
            return n or e.min == 0, f, c
        if isinstance(e, tree.Automaton):
            return e.nullable(), automaton_first(e), set()
        if isinstance(e, tree.TokenSet):  # one whole token by id: no character starts it
            return False, (), set()
        raise TypeError(f"unknown grammar node {e!r}")

    changed = True
    while changed:
        changed = False
        for name, rule in ast.rules.items():
            n, f, c = visit(rule.body)
            grown = set(c)
            for b in c:
                grown |= corners.get(b, set())
            new_first = _union(first[name], f)
            if (n and name not in nullable) or new_first != first[name] or not grown <= corners[name]:
                changed = True
                if n:
                    nullable.add(name)
                first[name] = new_first
                corners[name] |= grown
    return {
        name: RuleSets(name, name in nullable, first[name], tuple(r for r in ast.rules if r in corners[name]))
        for name in ast.rules
    }


_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x20: "' '"}


def _show_cp(cp: int) -> str:
    if cp in _NAMED:
        return _NAMED[cp]
    ch = chr(cp)
    if cp < 0x20 or 0x7F <= cp <= 0x9F or 0xD800 <= cp <= 0xDFFF or not ch.isprintable():
        return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"
    return f"'{ch}'"


def format_code_points(ranges: CodePoints, *, limit: int = 12) -> str:
    """Readable code-point set: ``'0'–'9', 'a'–'f'``; most of Unicode as ``anything but '"', '\\\\'``."""
    if not ranges:
        return "nothing"
    total = sum(hi - lo + 1 for lo, hi in ranges)
    if total > (MAX_CODE_POINT + 1) // 2:
        rest = complement(ranges)
        return "any character" if not rest else "anything but " + format_code_points(tuple(rest), limit=limit)
    parts = [_show_cp(lo) if lo == hi else f"{_show_cp(lo)}–{_show_cp(hi)}" for lo, hi in ranges]
    more = len(parts) - limit
    return ", ".join(parts[:limit]) + (f" and {more} more ranges" if more > 0 else "")


def expected_bytes(gnf, data: bytes) -> tuple[ByteSet, bool]:
    """The bytes that may follow the prefix ``data``, and whether the input may end there.

    Runs the GNF pushdown automaton (the set of stacks is one word set) over ``data``;
    the allowed next bytes are the atoms some top of stack has a production for. An
    empty set with False means ``data`` is no prefix of any sentence.
    """
    store, table = gnf.store, gnf.table
    stacks = store.word((gnf.start,))
    ends = gnf.accepts_empty
    for byte in data:
        stacks = gnf.step_stacks(stacks, byte)
        if stacks == EMPTY:
            return ByteSet(0), False
        ends = store.accepts(stacks)
    bits = 0
    for top, _ in store.edges(stacks):
        for atom in table[top]:
            bits |= gnf.atoms[atom].bits
    return ByteSet(bits & BYTE_BITS), ends if data else gnf.accepts_empty  # token atoms are no bytes


def describe_bytes(s: ByteSet, *, limit: int = 16) -> str:
    """Printable ranges of a byte set: ``'"', '-', '0'–'9', '[', 'f', 'n', 't', '{'``;
    bytes 0x80..0xFF are named as UTF-8 lead or continuation bytes."""
    values = list(s)
    if not values:
        return "nothing"
    runs: list[tuple[int, int]] = []
    for b in values:
        if runs and b == runs[-1][1] + 1 and b != 0x80:  # ASCII and the high bytes apart
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((b, b))
    parts = []
    for lo, hi in runs:
        if lo >= 0x80:  # split at the lead/continuation boundary for the words below
            for a, z, what in ((0x80, 0xBF, "continuation"), (0xC0, 0xFF, "lead")):
                x, y = max(lo, a), min(hi, z)
                if x <= y:
                    text = f"\\x{x:02x}" if x == y else f"\\x{x:02x}–\\x{y:02x}"
                    parts.append(f"{text} (UTF-8 {what} byte{'s' if x != y else ''})")
            continue
        parts.append(_show_cp(lo) if lo == hi else f"{_show_cp(lo)}–{_show_cp(hi)}")
    more = len(parts) - limit
    return ", ".join(parts[:limit]) + (f" and {more} more" if more > 0 else "")
