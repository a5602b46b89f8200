"""The byte CFG straight from XGrammar's grammar object, without parsing the EBNF it prints.

A JSON Schema's grammar is built by XGrammar (``Grammar.from_json_schema``); the text path prints it
(``str(grammar)``), parses that text (:func:`~.ebnf.parse_ebnf`) and lowers the syntax tree
(:func:`~.lower.lower`). On a median MaskBench schema the parse and the lowering were ~1.1 ms of
a ~6.5 ms first mask. :func:`cfg_from_grammar` reads the grammar's own arrays instead
(``Grammar.serialize_json()``: rules, and every expression as ``[type, length, data...]`` in one flat
array) and makes the very CFG the text path makes: the same nonterminals in the same order, the same
names (``rule@n``), productions, byte sets, counted repetitions, origins and symbol spans.

Spans and origins point into the printed text, so the conversion walks that text beside the arrays:
XGrammar prints one rule a line (``name ::= body``), a sequence as ``(a b c)``, a choice as
``(a | b)``, a byte string as a quoted literal, a class as ``[...]`` (``[...]*`` for a class star),
a repetition as ``name{min, max}``, the empty string as ``""``, a regex body as ``Regex("...",
json_string=...)`` and a lookahead after the body as ``(=...)``. Each expression's extent follows from
its type and its place (a literal or a class ends at its first unescaped ``"`` / ``]``); a group of one
element is the element itself, whose span is the group's (as the parser makes it). At the end of each
rule the walk must stand at the end of its body on that line; anything else (another layout, an
expression type or rule attribute not read here, a regex with warnings, a format version not known)
raises :class:`Unsupported` and the caller takes the text path, which stays the referee
(``tests/test_serialized.py`` compares the two CFGs on MaskBench and the JSON-Schema-Test-Suite).

The syntax tree is not made here: what needs it (warnings, diagnostics, the workbench) parses the
text when it first asks (:class:`~cfgzip_lab.pipeline.CompiledGrammar` from this path).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .._binding import kernel
from .cfg import CFG
from .counted import COUNTED_THRESHOLD, Counted
from .lower import _BYTE, _class_byte_sequences, _Lowerer
from .provenance import Origin, _make_origin
from .regex import RegexError, regex_to_expr

if TYPE_CHECKING:
    from ..deadline import Deadline

__all__ = ["Unsupported", "cfg_from_grammar", "cfg_from_serialized", "copy_of"]

#: The serialization formats read here (``__VERSION__`` of ``serialize_json``: v16 XGrammar 0.2.8, v18 0.2.9;
#: the same rule layout and expression types for everything read here).
FORMATS = ("v16", "v18")

# GrammarExprType in XGrammar's cpp/grammar_impl.h, by value.
BYTES, CLASS, STAR, EMPTY, REF, SEQ, CHOICES, TAG_DISPATCH, REPEAT = range(9)
REGEX = 12
_LEAVES = frozenset((BYTES, CLASS, STAR, EMPTY, REGEX))
_WIDTH = 40  # provenance.origin_at's excerpt width

IN_C = True
"""Whether the walk over the rules runs in C (``csrc/serialized.c``, ``serialized_rules``) where the kernel is
built, and ``serialize_json``'s expression arrays are read there (:func:`_read_serialized`): the same CFG, names,
origins and order (``tests/test_serialized.py`` compares the two walks); the Python methods of :class:`_Converter`
(``rule``, ``alternatives``, ``symbols``, ``origin``, ``char_class``, ``star``, ``fresh``) and ``json.loads`` are
its reference. The walk was ~0.4 ms of Python on a median MaskBench schema, ~0.16 in C; repetitions and regex
bodies (:meth:`_Converter.repeat`, :meth:`_Converter.regex`) are still made in Python, called back in order."""


class Unsupported(Exception):
    """The grammar holds something this conversion does not read: take the text path."""


def cfg_from_grammar(
    grammar: Any, text: str, *, counted_threshold: int = COUNTED_THRESHOLD, deadline: Deadline | None = None
) -> CFG:
    """The byte CFG of an ``xgrammar.Grammar`` whose printed EBNF is ``text``.

    Parameters
    ----------
    grammar : xgrammar.Grammar
        The grammar XGrammar built (from a JSON Schema).
    text : str
        Its printed EBNF as the pipeline keeps it (:func:`~.printed.printed_ebnf`): spans and origins
        point into it.
    counted_threshold : int, keyword-only
        As :func:`~.lower.lower`'s.
    deadline : Deadline or None, keyword-only
        The build's time budget, checked where a regex is built and lowered (:func:`~.regex.regex_to_expr`).

    Returns
    -------
    CFG
        Equal to ``lower(parse_ebnf(text, reachable_only=True))``: rules, origins, symbol spans,
        counted repetitions, in the same order. Kept, and returned again for the same text: to change
        it, take a :func:`copy_of` it.

    Raises
    ------
    Unsupported
        Where the grammar or its text is not what this conversion reads (the text path then runs).
    """
    key = (text, counted_threshold)
    cfg = _KEPT.get(key)
    if cfg is None:
        data = _read_serialized(grammar.serialize_json())
        cfg = cfg_from_serialized(data, text, counted_threshold=counted_threshold, deadline=deadline)
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.clear()  # derived data only: dropped whole
        _KEPT[key] = cfg
    return cfg


def copy_of(cfg: CFG) -> CFG:
    """A CFG of :func:`cfg_from_grammar` to change (its productions' lists copied): the one returned is
    kept for the next build of the same text, and must stay as it is."""
    return CFG(
        start=cfg.start,
        rules={name: list(alts) for name, alts in cfg.rules.items()},
        origins=dict(cfg.origins),
        symbol_spans={name: list(spans) for name, spans in cfg.symbol_spans.items()},
        text=cfg.text,
        counted=dict(cfg.counted),
        tokens=cfg.tokens,
    )


# The printed text (and threshold) → its CFG, for a grammar built again (a schema compiled twice, a profile's
# repeats): the text path's parse and lowering keep theirs too. Exact because the CFG read from the arrays is
# the one the text path reads from the text (tests/test_serialized.py), whatever grammar object printed it.
_KEPT: dict[tuple[str, int], CFG] = {}
_KEPT_MAX = 16


#: The two expression arrays of ``serialize_json()``: most of its text, read by :func:`_read_serialized` in C.
_ARRAYS = ("grammar_expr_data", "grammar_expr_indptr")


def _read_serialized(serialized: str) -> dict:
    """``json.loads(serialized)``, its two integer arrays read in C (``json_ints``, ~2/3 of json.loads' time
    on a median MaskBench schema) and the rest, each array replaced by a ``0``, by ``json.loads``: an array
    read here is the top-level key's exactly where that key then reads ``0``; anything else is read whole."""
    if not IN_C or kernel is None:
        return json.loads(serialized)
    rest, arrays = serialized, {}
    for key in _ARRAYS:
        at = rest.find(f'"{key}":[')
        if at < 0:
            return json.loads(serialized)
        at += len(key) + 3
        try:
            arrays[key], end = kernel.json_ints(rest, at)
        except ValueError:  # an array of other values
            return json.loads(serialized)
        rest = rest[:at] + "0" + rest[end:]
    try:
        data = json.loads(rest)
    except ValueError:  # (a key found inside a string: the text cut there reads otherwise)
        return json.loads(serialized)
    if data.__class__ is not dict or any(data.get(key) != 0 for key in _ARRAYS):
        return json.loads(serialized)
    data.update(arrays)
    return data


def cfg_from_serialized(
    data: dict, text: str, *, counted_threshold: int = COUNTED_THRESHOLD, deadline: Deadline | None = None
) -> CFG:
    """:func:`cfg_from_grammar` of a grammar's ``serialize_json()``, already read as JSON."""
    if data.get("__VERSION__") not in FORMATS:
        raise Unsupported(f"serialization format {data.get('__VERSION__')!r}")
    return _Converter(data, text, counted_threshold, deadline).cfg


# A printed literal and a printed class, escapes consumed whole (``"\\""``, ``[\\]]``).
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_CLASS = re.compile(r"\[(?:[^\]\\]|\\.)*\]", re.DOTALL)


def _end(pattern: re.Pattern, text: str, pos: int) -> int:
    """Where the literal or class printed at ``pos`` ends."""
    match = pattern.match(text, pos)
    if match is None:
        raise Unsupported(f"no {pattern.pattern[:1]}...{pattern.pattern[-1:]} at offset {pos}")
    return match.end()


def _utf8(chunk: list[int]) -> bool:
    try:
        bytes(chunk).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _live_rules(data: list[int], indptr: list[int], rules: list, root: int) -> set[int]:
    """The rules the root reaches through rule bodies (lookaheads are dropped, as the parse drops them)."""
    live, todo = {root}, [root]
    while todo:
        stack = [rules[todo.pop()][1]]
        while stack:
            s = indptr[stack.pop()]
            t = data[s]
            if t == REF or t == REPEAT:
                k = data[s + 2]
                if k not in live:
                    live.add(k)
                    todo.append(k)
            elif t == SEQ or t == CHOICES:
                stack.extend(data[s + 2 : s + 2 + data[s + 1]])
            elif t not in _LEAVES:
                raise Unsupported(f"expression type {t}")
    return live


class _Converter:
    """One conversion: the arrays, the text, and the lowering's state (helper counters, classes made)."""

    class_sequences = staticmethod(_class_byte_sequences)  # (what the walk in C calls for a class not made yet)

    def __init__(self, serialized: dict, text: str, threshold: int, deadline: Deadline | None = None) -> None:
        self.data = data = serialized["grammar_expr_data"]
        self.indptr = indptr = serialized["grammar_expr_indptr"]
        rules = serialized["rules"]
        self.names = names = [rule[0] for rule in rules]
        self.text = text
        self.threshold = threshold
        self.deadline = deadline
        root = serialized["root_rule_id"]
        for rule in rules:
            # [name, body, lookahead, exact lookahead, max_tokens, max_chars, capture, lazy, temperature]:
            # any attribute is the parse's to read (or refuse), even on a rule the root never reaches
            if len(rule) != 9 or rule[4] != -1 or rule[5] != -1 or rule[6] or rule[7] or rule[8] is not None:
                raise Unsupported(f"rule attributes of {rule[0]!r}")
        find = text.find
        starts = [0]  # one rule a line, in rule order; the text ends with a newline
        for _ in range(len(rules)):
            starts.append(find("\n", starts[-1]) + 1)
        if starts[-1] != len(text) or 0 in starts[1:]:
            raise Unsupported("not one line a rule")
        self.cfg = cfg = CFG(start=names[root], text=text)
        self.rules, self.origins, self.spans, self.counted = cfg.rules, cfg.origins, cfg.symbol_spans, cfg.counted
        self.counters: dict[str, int] = {}
        self.classes: dict[tuple, object] = {}  # a class's data → its byte set or nonterminal (lower's class_cache)
        self.excerpts: dict[str, str] = {}
        self.lowerer: _Lowerer | None = None
        self.line = self.line_start = 0
        if IN_C and kernel is not None:  # the live rules, their names and origins and the walk below, in C
            kernel.serialized_rules(self, rules, root, starts, _BYTE, Origin, Unsupported)
            return
        live = _live_rules(data, indptr, rules, root)
        order = [r for r in range(len(rules)) if r in live]
        for r in order:  # lower(): every rule named first, with its origin (the whole line)
            name = names[r]
            self.rules[name] = []
            self.line, self.line_start = r + 1, starts[r]
            self.origins[name] = self.origin(name, "rule", (starts[r], starts[r + 1] - 1))
        for r in order:
            self.rule(r, rules[r], starts[r], starts[r + 1] - 1)

    # ---- provenance -----------------------------------------------------------------------------

    def origin(self, rule: str, kind: str, span: tuple[int, int]):
        """``provenance.origin_at(rule, kind, span, text)`` for a span on the current rule's line."""
        start, end = span
        excerpt = self.text[start:end]
        short = self.excerpts.get(excerpt)
        if short is None:
            short = excerpt
            if not short.isprintable() or " " in short:
                short = " ".join(short.split())
            if len(short) > _WIDTH:
                short = short[: _WIDTH - 1] + "…"
            self.excerpts[excerpt] = short
        return _make_origin(rule, kind, span, self.line, start - self.line_start + 1, short)

    def fresh(self, owner: str, alts: list, kind: str, span: tuple[int, int], spans: list) -> str:
        """A helper nonterminal ``owner@n`` (``lower._Lowerer.fresh``)."""
        n = self.counters.get(owner, 0) + 1
        self.counters[owner] = n
        name = f"{owner}@{n}"
        self.rules[name] = alts
        self.origins[name] = self.origin(owner, kind, span)
        self.spans[name] = spans
        return name

    def star(self, owner: str, item, item_span: tuple[int, int], span: tuple[int, int]) -> str:
        """``item*`` as ``star → ε | item star`` (``lower._Lowerer.repeat``)."""
        n = self.counters.get(owner, 0) + 1
        self.counters[owner] = n
        name = f"{owner}@{n}"
        self.rules[name] = [(), (item, name)]
        self.origins[name] = self.origin(owner, "repetition", span)
        self.spans[name] = [(), (item_span, span)]
        return name

    def char_class(self, owner: str, s: int, n: int, span: tuple[int, int]):
        """The symbol of the class at data ``s``: one byte set, or a nonterminal made by the first rule
        that uses the class (``lower._Lowerer.char_class``; the data ``[negated, lo, hi, ...]`` keys it as
        the parsed ranges, in their printed order, key lower's cache)."""
        data = self.data
        raw = tuple(data[s + 2 : s + 2 + n])
        got = self.classes.get(raw, self)
        if got is not self:
            return got
        seqs = _class_byte_sequences(tuple(zip(raw[1::2], raw[2::2])), raw[0] != 0)
        if not seqs:
            got = self.fresh(owner, [], "character class", span, [])
        elif len(seqs) == 1 and len(seqs[0]) == 1:
            got = seqs[0][0]
        else:
            got = self.fresh(owner, list(seqs), "character class", span, [(span,) * len(q) for q in seqs])
        self.classes[raw] = got
        return got

    # ---- the walk -------------------------------------------------------------------------------

    def rule(self, r: int, rule: list, start: int, line_end: int) -> None:
        name, body, lookahead = rule[0], rule[1], rule[2]
        text = self.text
        if not text.startswith(name + " ::= ", start):
            raise Unsupported(f"rule {name!r} not at its line")
        self.line, self.line_start = r + 1, start
        at = start + len(name) + 5
        s = self.indptr[body]
        if self.data[s] == REGEX:
            end = self.regex(name, s, at)
        else:
            productions: list = []
            spans: list = []
            end = self.alternatives(name, body, at, productions, spans)
            self.rules[name] = productions
            self.spans[name] = spans
        if lookahead != -1 and not text.startswith(" (=", end) or lookahead == -1 and end != line_end:
            raise Unsupported(f"rule {name!r}: the body's end is not where the walk ends")

    def regex(self, name: str, s: int, at: int) -> int:
        """A ``Regex("...", json_string=...)`` body: XGrammar's automaton (:mod:`.regex`), lowered as
        :meth:`~.lower._Lowerer.automaton` lowers it."""
        data, text = self.data, self.text
        if not text.startswith('Regex("', at):
            raise Unsupported("a regex printed otherwise")
        end = text.find(")", _end(_LITERAL, text, at + 6)) + 1
        span = (at, end)
        chunk = data[s + 3 : s + 2 + data[s + 1]]
        if 0 in chunk:  # printed as the pattern's end, as in a byte string
            raise Unsupported("a regex the printed EBNF does not spell")
        pattern = bytes(chunk).decode("utf-8", "surrogatepass")
        warnings: list = []
        try:
            automaton = regex_to_expr(
                pattern, json_string=data[s + 2] != 0, flags=None, warnings=warnings, span=span, deadline=self.deadline
            )
        except RegexError as error:
            raise Unsupported(f"a regex the parse refuses ({error})") from None
        if warnings:
            raise Unsupported("a regex with warnings (the parse places them in the schema)")
        if self.lowerer is None:
            self.lowerer = _Lowerer(self.cfg, text, counted_threshold=self.threshold, deadline=self.deadline)
        self.lowerer.counters = self.counters
        self.rules[name] = [(self.lowerer.automaton(name, automaton),)]
        self.spans[name] = [(span,)]
        return end

    def alternatives(self, owner: str, i: int, pos: int, productions: list, spans: list) -> int:
        """Append the productions of expression ``i`` printed at ``pos`` (a choice's options, each
        flattened as ``lower._Lowerer.spanned_alternatives`` does) and their spans; return its end."""
        data, indptr = self.data, self.indptr
        s = indptr[i]
        t, n = data[s], data[s + 1]
        outer, wrap = pos, 0
        while n == 1 and (t == SEQ or t == CHOICES):  # a group of one: the element, with the group's span
            wrap += 1
            s = indptr[data[s + 2]]
            t, n = data[s], data[s + 1]
        pos += wrap
        if t == CHOICES:
            p = pos + 1
            for k in range(n):
                if k:
                    p += 3  # " | "
                p = self.alternatives(owner, data[s + 2 + k], p, productions, spans)
            return p + 1 + wrap
        symbols: list = []
        at: list = []
        end = self.symbols(owner, s, t, n, outer, pos, wrap, symbols, at)
        productions.append(tuple(symbols))
        spans.append(tuple(at))
        return end

    def symbols(self, owner: str, s: int, t: int, n: int, outer: int, pos: int, wrap: int, out: list, at: list) -> int:
        """Append the symbols of the expression at data ``s`` (type ``t``, ``n`` data) to ``out`` and their
        spans to ``at`` (``lower._Lowerer.symbols``). Its own text starts at ``pos``, inside ``wrap``
        parentheses of groups of one that start at ``outer``; return where those end."""
        data, text = self.data, self.text
        if t == BYTES:
            end = _end(_LITERAL, text, pos) + wrap
            chunk = data[s + 2 : s + 2 + n]
            if n and (min(chunk) == 0 or max(chunk) >= 0x80 and not _utf8(chunk)):
                # XGrammar prints a NUL as the literal's end ("a" "" "b" for a\0b), and bytes that are no
                # UTF-8 as code points: the text path reads another language there, and is the referee
                raise Unsupported("a byte string the printed EBNF does not spell")
            out.extend([_BYTE[b] for b in chunk])
            at.extend([(outer, end)] * n)
            return end
        if t == REF:
            name = self.names[data[s + 2]]
            end = pos + len(name) + wrap
            out.append(name)
            at.append((outer, end))
            return end
        if t == SEQ:
            indptr = self.indptr
            p = pos + 1
            for k in range(n):
                if k:
                    p += 1  # " "
                j = indptr[data[s + 2 + k]]
                t2, n2 = data[j], data[j + 1]
                w2 = 0
                while n2 == 1 and (t2 == SEQ or t2 == CHOICES):
                    w2 += 1
                    j = indptr[data[j + 2]]
                    t2, n2 = data[j], data[j + 1]
                p = self.symbols(owner, j, t2, n2, p, p + w2, w2, out, at)
            return p + 1 + wrap
        if t == CLASS:
            end = _end(_CLASS, text, pos) + wrap
            span = (outer, end)
            out.append(self.char_class(owner, s, n, span))
            at.append(span)
            return end
        if t == STAR:
            class_end = _end(_CLASS, text, pos)
            end = class_end + 1 + wrap
            span, inner = (outer, end), (pos, class_end)
            out.append(self.star(owner, self.char_class(owner, s, n, inner), inner, span))
            at.append(span)
            return end
        if t == EMPTY:
            return pos + 2 + wrap
        if t == CHOICES:
            productions: list = []
            spans: list = []
            p = pos + 1
            for k in range(n):
                if k:
                    p += 3
                p = self.alternatives(owner, data[s + 2 + k], p, productions, spans)
            end = p + 1 + wrap
            span = (outer, end)
            out.append(self.fresh(owner, productions, "alternation", span, spans))
            at.append(span)
            return end
        if t == REPEAT:
            return self.repeat(owner, s, outer, pos, wrap, out, at)
        raise Unsupported(f"expression type {t} inside a rule")

    def repeat(self, owner: str, s: int, outer: int, pos: int, wrap: int, out: list, at: list) -> int:
        """``name{min, max}`` (``lower._Lowerer.repeat`` of a rule reference; max -1: unbounded)."""
        data = self.data
        item = self.names[data[s + 2]]
        lo, hi = data[s + 3], data[s + 4]
        end = self.text.find("}", pos) + 1 + wrap
        span, item_span = (outer, end), (pos, pos + len(item))
        hi = None if hi == -1 else hi
        if (hi if hi is not None else lo) > self.threshold:
            counted = self.fresh(owner, [], "counted repetition", span, [])
            self.counted[counted] = Counted(item, lo, hi)
            out.append(counted)
            at.append(span)
            return end
        if lo:
            out.extend([item] * lo)
            at.extend([item_span] * lo)
        if hi is None:
            out.append(self.star(owner, item, item_span, span))
            at.append(span)
            return end
        tail: list = []
        kind = "optional" if (lo, hi) == (0, 1) else "bounded repetition"
        for _ in range(hi - lo):  # X{0,k} = ε | X X{0,k-1}
            tail = [self.fresh(owner, [(), (item, *tail)], kind, span, [(), (item_span,) + (span,) * len(tail)])]
        out.extend(tail)
        at.extend([span] * len(tail))
        return end
