"""Where XGrammar's mask leaves its own matcher: a character class repeated past 128 in the grammar.

XGrammar unrolls a repetition with bounds up to 128. Past that (``r{1,200}``, ``[a-z ]{129}``,
``([0-9]*){200,1000}``) its grammar-level expander writes rules whose lookahead assertions hold copies of
the repeated class (``r_repeat_1 ::= [cls] (= [cls] [cls] ...)``), and a token that ends such a rule mid-token
is put in the mask, or left out, by that assertion. The assertion reads a class byte by byte in the Earley
parser, not through the class's automaton the matcher runs, and reads some bytes otherwise
(:mod:`.lookahead_reading`): with ``root ::= "\\"" r{1,200} "\\""`` and ``r ::= [a-z ]`` the mask after ``"``
holds `` \\xe0`` and `` \\xf0``, which ``accept_token`` refuses; with MaskBench Github_hard o79409's ``name``
pattern (a class of ~500 Unicode ranges with a space, ``{1,200}``) about 2,500 tokens such as `` {``; with
``[^\\u0800-\\u0fff]{200,300}`` it leaves out 103,665 tokens the matcher takes. Same in XGrammar 0.2.8 and
0.2.9; found by the full 10,282-file MaskBench run (4 of 2,752,397 masks differed, all in o79409).

A ``Regex`` repetition is a counted edge of the regex's automaton, with no such lookahead (its masks were
the matcher's in every probe), and a string literal is no class, so bounds inside string literals are
passed over. A repetition whose body is one class (``[...]{...}``, ``([...]){...}``, ``([...]*){...}``, or a
rule whose definition line is one class) counts only where the vocabulary holds a token the two readings
take differently (:func:`~.lookahead_reading.misread_tokens`: none for a JSON string's ``[^"\\\\\\r\\n]`` with
Llama-3); a body that cannot be read as one class (a group of several parts, a rule not found) counts, to be
safe. Where one counts, the grammar is served by XGrammar itself, as a nested root is
(:mod:`.nested_root`), and the compressed engine refuses it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

from .diagnostics import Diagnostic, GrammarError, position_of
from .lookahead_reading import ClassReading, misread_tokens
from .regex_fsm import LARGE_REPEAT_THRESHOLD
from .tree import CharClass

__all__ = ["LARGE_REPEAT_REASON", "LargeRepeat", "large_repeat_in_text", "large_repeats"]

LARGE_REPEAT_REASON = (
    "a character class repeated with a bound above {threshold} ({bound}): XGrammar compiles it into rules whose "
    "lookahead reads the class byte by byte otherwise than its matcher does{detail}, so its token masks leave "
    "the grammar's language there; cfgzip's walks follow the matcher, so this grammar's masks come from "
    "XGrammar itself over the whole vocabulary. Bounds up to {threshold} (or an unbounded + / *) let the "
    "native engine serve it"
)

_BOUND = re.compile(r"\{\s*(\d+)\s*(,\s*(-?\d*)\s*)?\}")
_NAME_BEFORE = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)$")  # searched with an end position: $ is there
_SINGLE_CLASS = re.compile(r"\(*\s*\[(?:[^\]\\]|\\.)*\]\s*[*+?]?\s*\)*")
_LEXEMES = re.compile(r'\[(?:[^\]\\]|\\.)*\]|"(?:[^"\\]|\\.)*"|#[^\n]*')
_CLASS = re.compile(r"\[(?:[^\]\\]|\\.)*\]")
# a rule's definition at a line start: the name (the whole token) and its body (what _definition_of searches)
_DEFINITION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*::=\s*(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class LargeRepeat:
    """A repetition past the threshold in an EBNF text: where its bound stands, the bound as written, and the
    text of the class it repeats (None where that cannot be read as one class: a group of several parts, a rule
    not found)."""

    offset: int
    bound: str
    class_text: str | None


def large_repeats(text: str) -> list[LargeRepeat]:
    """Every repetition of ``text`` that may make XGrammar read a class through a lookahead (a bound above
    :data:`~.regex_fsm.LARGE_REPEAT_THRESHOLD` on a class, a group or a class rule; none inside a string literal,
    a ``Regex``'s among them)."""
    if text.find("{") < 0:  # most grammars hold no bound
        return []
    found = []
    lexemes = None
    for bound in _BOUND.finditer(text):
        if _large(bound):
            lexemes = _lexemes(text) if lexemes is None else lexemes
            # a string literal's, a Regex's (a counted edge: no lookahead)
            if _inside(lexemes.quoted, lexemes.quoted_starts, bound.start()):
                continue
            repeated = _repeated(text, bound.start(), lexemes)
            if repeated is not False:
                found.append(LargeRepeat(bound.start(), bound.group(0), repeated))
    return found


def large_repeat_in_text(text: str, vocab=None) -> Diagnostic | None:
    """The first repetition of an EBNF text where XGrammar's mask may leave its matcher, as a diagnostic at
    it; None where there is none. Without ``vocab`` every :func:`large_repeats` counts; with it, a repetition
    of one class counts only where the vocabulary holds a token XGrammar's lookahead reads otherwise than
    its matcher (:func:`~.lookahead_reading.misread_tokens`), and the message names some."""
    for repeat in large_repeats(text):
        if vocab is None or repeat.class_text is None:
            return _diagnostic(text, repeat.offset, repeat.bound)
        reading = _reading(repeat.class_text)
        if reading is None:
            return _diagnostic(text, repeat.offset, repeat.bound)
        misread = misread_tokens(reading, vocab)
        if misread:
            shown = ", ".join(repr(bytes(vocab.token_bytes[t]))[1:] for t in misread[:3])
            detail = f" ({len(misread)} tokens of vocabulary {vocab.name!r} are read otherwise, such as {shown})"
            return _diagnostic(text, repeat.offset, repeat.bound, detail)
    return None


@lru_cache(maxsize=256)  # (a schema repeats one class per string property: o9906 149 times)
def _reading(class_text: str) -> ClassReading | None:
    """The class as XGrammar holds it, read by cfgzip's EBNF parser (None where it cannot be read)."""
    from .ebnf import parse_ebnf

    try:
        body = parse_ebnf(f"root ::= {class_text}\n").rules["root"].body
    except GrammarError:
        return None
    return ClassReading(tuple(body.ranges), body.negated) if isinstance(body, CharClass) else None


@dataclass
class _Lexemes:
    """Where ``text``'s string literals and comments stand, and its classes (end offset → start), read left
    to right so that a quote in a class is no string and a bracket in a string no class."""

    quoted: list[tuple[int, int]]
    classes: dict[int, int]
    quoted_starts: list[int] = field(default_factory=list)  # quoted's starts (ascending: spans left to right)
    definitions: dict[str, re.Match] | None = None  # the first definition of each rule name, when first asked


def _lexemes(text: str) -> _Lexemes:
    quoted, classes = [], {}
    for m in _LEXEMES.finditer(text):
        if m.group(0)[0] == "[":
            classes[m.end()] = m.start()
        else:
            quoted.append(m.span())
    return _Lexemes(quoted, classes, [a for a, _ in quoted])


def _inside(spans: list[tuple[int, int]], starts: list[int], at: int) -> bool:
    """Whether ``at`` is inside one of ``spans`` (disjoint, left to right; ``starts`` their starts): the last
    span starting at or before ``at`` is the only one that can hold it (a scan of every span per bound took
    most of o9906's 141 ms: 149 bounds, 2,600 literals)."""
    i = bisect_right(starts, at) - 1
    return i >= 0 and at < spans[i][1]


def _definition_of(text: str, name: str) -> re.Match | None:
    """The first definition of rule ``name`` in ``text`` (the reference :func:`_definitions` indexes)."""
    return re.search(rf"(?m)^\s*{re.escape(name)}\s*::=\s*(.*)$", text)


def _definitions(text: str) -> dict[str, re.Match]:
    """Each rule name's first definition, as :func:`_definition_of` finds it, read once for all names: at
    each line start (``^`` in multi-line mode), the one name whose definition can begin there is the whole
    token after the blanks (a shorter name is followed by a name character, neither blank nor ``:``), so the
    first line start where a name's definition matches is the first where :data:`_DEFINITION` reads it, with
    the same body (group 2 here, 1 there). One search over the text per large bound took 134 ms of o9906's
    build (149 bounds, one rule each, 176 kB of EBNF)."""
    found: dict[str, re.Match] = {}
    at = 0
    while at >= 0:
        m = _DEFINITION.match(text, at)
        if m is not None and m.group(1) not in found:
            found[m.group(1)] = m
        at = text.find("\n", at)
        at = at + 1 if at >= 0 else -1
    return found


def _large(bound: re.Match) -> bool:
    low, comma, high = int(bound.group(1)), bound.group(2), bound.group(3)
    top = int(high) if comma and high not in ("", "-1") else None
    if comma is None:  # {n}
        return low > LARGE_REPEAT_THRESHOLD
    return top > LARGE_REPEAT_THRESHOLD if top is not None else low > LARGE_REPEAT_THRESHOLD


def _repeated(text: str, at: int, lexemes: _Lexemes) -> str | None | bool:
    """What stands before the ``{`` at ``at``: the text of the class it repeats (a class, a class in
    parentheses, with a ``*``, ``+`` or ``?``; a rule whose definition is one class), None where it may be a
    class but cannot be read as one (a group of several parts, a rule not found: counted, to be safe),
    False where it is no class (a string literal, a rule of another shape)."""
    end = at
    while end > 0 and text[end - 1] in " \t\r\n":
        end -= 1
    if text[end - 1 : end] in ("]", ")"):
        closing = 0
        while end > 0 and text[end - 1] in " \t\r\n)":
            closing += text[end - 1] == ")"
            end -= 1
        if text[end - 1 : end] in ("*", "+", "?"):
            end -= 1
        start = lexemes.classes.get(end)
        if start is None:
            return None
        opening, before = 0, start
        while before > 0 and text[before - 1] in " \t\r\n(" and opening < closing:
            opening += text[before - 1] == "("
            before -= 1
        return text[start:end] if opening == closing else None
    if text[end - 1 : end] == '"':  # a string literal: a byte string, never a class in XGrammar
        return False
    name = _NAME_BEFORE.search(text, max(0, end - 200), end)
    if name is None:
        return None
    if lexemes.definitions is None:
        lexemes.definitions = _definitions(text)
    definition = lexemes.definitions.get(name.group(1))
    if definition is None:
        return None
    body = definition.group(2).strip()
    if not body or _SINGLE_CLASS.fullmatch(body) is None:
        return False if body else None
    return _CLASS.search(body).group(0)


def _diagnostic(text: str, offset: int, bound: str, detail: str = "") -> Diagnostic:
    line, column = position_of(text, offset)
    message = LARGE_REPEAT_REASON.format(threshold=LARGE_REPEAT_THRESHOLD, bound=bound, detail=detail)
    return Diagnostic(line, column, message)
