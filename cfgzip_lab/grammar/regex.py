"""XGrammar's ``Regex("...", json_string=..., flags=...)`` → grammar AST, with XGrammar's exact meaning.

XGrammar compiles a ``Regex`` macro into a byte automaton (``RegexIR`` in
``cpp/fsm_builder.cc``; JSON Schema ``pattern`` s, ``patternProperties`` and
``propertyNames`` print as such macros). This module parses the same dialect, with the same
stack discipline, into XGrammar's IR (:mod:`.regex_fsm`), which builds the automaton state
for state as XGrammar does, quirks included (``X?`` reaching past the lowest end of X,
overlong UTF-8 for classes spanning several lengths, large repeats as sub-rules; see
:mod:`.regex_fsm`), and returns it as a :class:`~.tree.Automaton`. Where XGrammar 0.2.8 and
0.2.9 differ (``\\s``, ``json_string`` in a large repeat; ``docs/xgrammar_versions.md``), the
installed release decides (:func:`cfgzip_lab.xgrammar_version.at_least`).
Every fact below was checked by feeding bytes to a real ``GrammarMatcher``
(``tests/test_regex.py`` and ``tests/test_regex_fsm.py`` pin them):

- The whole pattern must match. Characters are code points matched as UTF-8; ``.`` is any
  code point U+0000..U+10FFFF, newline included (unless ``flags`` is given without ``s``).
- Escapes: ``\\n \\t \\r \\f \\v \\a \\e \\0`` (``\\012`` is ``\\0`` then ``12``), ``\\xHH``
  (exactly two digits), ``\\uHHHH``, ``\\u{H..H}`` (1-6 digits, at most U+10FFFF), ``\\cX``
  (a letter, code ``X & 31``), any other character escaped is itself (``\\U`` is ``U``).
  ``\\d`` = ``[0-9]``, ``\\w`` = ``[0-9A-Za-z_]``, ``\\s`` follows the installed release
  (:data:`ASCII_SPACE` ``[\\t-\\r ]`` up to 0.2.8, :data:`UNICODE_SPACE` with U+00A0, U+3000
  and the other Unicode spaces from 0.2.9) and the negated ``\\D \\W \\S`` are their
  complements over all code points.
- Classes: ``[...]``/``[^...]``, ranges ``a-z``, escapes as above plus ``\\b`` (backspace);
  ``-`` is literal first, last or after a ``\\d``-like escape; ``[`` is literal inside;
  the first ``]`` always closes, so ``[]a]`` is the (rejected) empty class then ``a]``.
- Quantifiers ``* + ? {n} {n,} {n,m}`` (spaces allowed inside braces, counts up to 9 digits),
  each optionally lazy (``*?``: same language); a quantifier may follow another (``a**``).
- Groups ``( )``, ``(?: )``, named ``(?<n> )``/``(?P<n> )``; alternation ``|`` with empty
  branches allowed (``a|``, ``()``). A leading ``(?i)`` makes ASCII letters case-insensitive.
- Anchors ``^``/``$`` are skipped wherever they stand (``a^b`` matches ``ab``, ``a$*`` is
  ``a*``), and a lookahead ``(?=...)``/``(?!...)`` is the empty string: we do the same,
  exactly, with a *warning* (:class:`RegexWarning`) where that differs from what the pattern
  says (an anchor that is not at the start or end of the pattern or of a top-level
  alternative; every lookahead).
- ``json_string=true`` removes the bytes 00-1F, ``"`` and ``\\`` from every byte edge of the
  automaton: the pattern describes raw characters of the JSON string body and those would
  need escapes. It is *not* escape-aware: no pattern ever matches ``\\"`` under it. A large
  repetition (bound above 128) is a sub-rule, which the flag reaches from XGrammar 0.2.9 only
  (0.2.8 compiles it without; see :mod:`.regex_fsm`). Where removing them leaves a prefix that
  can never finish (``a"b``), XGrammar's matcher still accepts that prefix (a dead end): kept
  exactly, with a warning (:mod:`.dead_ends`).
- ``flags`` (the EBNF ``Regex(..., flags="...")`` argument): ``i`` is a leading ``(?i)``,
  ``u`` changes nothing, ``s`` lets ``.`` match ``\\n``; any other letter is an error. With
  the argument present and no ``s``, ``.`` outside classes matches every code point but
  ``\\n`` (XGrammar rewrites it to ``[^\\n]``); without the argument ``.`` matches ``\\n``.

Everything XGrammar itself rejects (lookbehind, backreferences, ``\\b``, ``\\p{..}``,
unbalanced brackets, a quantifier with nothing before it, an unrolled repetition past
XGrammar's 100,000-state cap...) is an error here too, with XGrammar's reason and the
position in the pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

from . import regex_fsm as fsm
from .lower import MAX_CODE_POINT
from .lower import complement as _complement
from .lower import normalize as _normalize
from .tree import Expr, Span

if TYPE_CHECKING:
    from ..deadline import Deadline

__all__ = [
    "RegexError",
    "RegexWarning",
    "regex_to_expr",
    "check_flags",
    "JSON_STRING_FORBIDDEN",
    "MAX_CODE_POINT",
    "ASCII_SPACE",
    "UNICODE_SPACE",
    "SUPPORTED_FLAGS",
]

#: What ``json_string=true`` removes from every character the regex matches.
JSON_STRING_FORBIDDEN = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
#: The letters XGrammar 0.2.8 accepts in ``Regex(..., flags="...")`` (``EBNFParser::ParseRegexMacro``).
SUPPORTED_FLAGS = "isu"
_MAX_REPEAT_DIGITS = 9  # XGrammar: "10^9 fits in an int"

_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
#: ``\\s`` up to XGrammar 0.2.8 (``RegexEscapeItem`` in ``cpp/fsm_builder.cc``): ASCII only.
ASCII_SPACE = ((0x09, 0x0D), (0x20, 0x20))
#: ``\\s`` from XGrammar 0.2.9 (``kWhitespaceClassRanges``): ECMAScript's WhiteSpace and
#: LineTerminator, every Unicode ``Space_Separator`` included (U+00A0, U+3000, ...) and U+FEFF.
UNICODE_SPACE = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_SHORTHAND_LETTERS = "dDwWsS"
_SINGLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B, "0": 0x00}
_HEX = "0123456789abcdefABCDEF"
_ALL = ((0, MAX_CODE_POINT),)
_NOT_NEWLINE = ((0, 0x09), (0x0B, MAX_CODE_POINT))

Ranges = tuple[tuple[int, int], ...]


@cache
def _shorthands() -> dict[str, tuple[Ranges, bool]]:
    """``\\d \\D \\w \\W \\s \\S`` as (code points, negated); ``\\s`` as the installed XGrammar has
    it, read the first time a pattern uses a shorthand (the version costs nothing elsewhere)."""
    from .. import xgrammar_version  # importlib.metadata: ~60 ms, paid only here

    space = UNICODE_SPACE if xgrammar_version.at_least("0.2.9") else ASCII_SPACE
    return {
        "d": (_DIGIT, False),
        "D": (_DIGIT, True),
        "w": (_WORD, False),
        "W": (_WORD, True),
        "s": (space, False),
        "S": (space, True),
    }


@dataclass
class RegexError(Exception):
    """A regex cfgzip cannot use: ``start``/``end`` are offsets in the pattern (code points).

    ``refused`` is True for constructs XGrammar accepts but cfgzip cannot reproduce exactly
    (a json_string dead end); False for patterns XGrammar rejects as well. ``in_flags``: the
    problem is in the ``flags`` argument, not in the pattern (offsets are then 0).
    """

    message: str
    start: int
    end: int
    refused: bool = False
    in_flags: bool = False

    def __str__(self) -> str:
        if self.in_flags:
            return self.message
        return f"{self.message} (at position {self.start + 1} of the pattern)"


@dataclass(frozen=True)
class RegexWarning:
    """Something XGrammar accepts and gives a meaning the pattern does not say; we mirror it.

    ``start``/``end`` are offsets in the pattern (code points).
    """

    message: str
    start: int
    end: int


def check_flags(flags: str) -> str | None:
    """XGrammar's message for a ``flags`` string it rejects, or None when it accepts it."""
    for letter in flags:
        if letter not in SUPPORTED_FLAGS:
            return f"regular-expression flag '{letter}' is not supported"
    return None


def regex_to_expr(
    pattern: str,
    *,
    json_string: bool = False,
    flags: str | None = None,
    warnings: list[RegexWarning] | None = None,
    span: Span | None = None,
    deadline: Deadline | None = None,
) -> Expr:
    """The AST for ``Regex(pattern, json_string=..., flags=...)`` as the installed XGrammar matches it.

    Parameters
    ----------
    pattern : str
        The regex, as code points (the EBNF string literal already unescaped).
    json_string : bool, keyword-only
        XGrammar's ``json_string`` flag: no control character, ``"`` or ``\\`` is matched.
    flags : str or None, keyword-only
        XGrammar's ``flags`` argument (letters of :data:`SUPPORTED_FLAGS`); None when the
        call has none, which is not the same as ``""`` (see the module docstring).
    warnings : list, keyword-only
        If given, :class:`RegexWarning` s are appended to it.
    span : (int, int), keyword-only
        Where the ``Regex(...)`` call is in the grammar text (kept on the AST for provenance).
    deadline : Deadline or None, keyword-only
        The build's time budget (:class:`~cfgzip_lab.deadline.Deadline`), checked while the automaton
        is built: a large unrolled repetition takes seconds.

    Returns
    -------
    Automaton
        XGrammar's automaton for the pattern (:class:`~.tree.Automaton`).

    Raises
    ------
    RegexError
        With the position in ``pattern`` and XGrammar's reason, or cfgzip's for a refusal.
    BuildBudgetError
        Past ``deadline``, naming the stage :data:`.regex_fsm.STAGE`.

    Examples
    --------
    >>> a = regex_to_expr("ab")
    >>> (a.num_states, a.finals, a.edges)
    (3, (2,), ((0, (97, 97), 1), (1, (98, 98), 2)))

    A pattern met again (a JSON Schema's ``pattern`` is one ``Regex(...)`` per property that has it) is
    not built again: its automaton is kept per (pattern, json_string, flags) and given this call's span
    (Github_hard o21075: 20 regexes, 6 distinct, 4.1 s to build them all, 1.1 s the distinct ones).
    """
    key = (pattern, json_string, flags)
    got = _BUILT.get(key)
    if got is None:
        found: list[RegexWarning] = []
        automaton = _regex_to_expr(pattern, json_string, flags, found, span, deadline)
        if len(_BUILT) >= _BUILT_KEPT:
            _BUILT.clear()  # derived data only: dropped whole
        _BUILT[key] = got = (automaton, tuple(found))
    automaton, found = got
    if warnings is not None:
        warnings.extend(found)
    return automaton if automaton.span == span else _with_span(automaton, span)


_BUILT: dict[tuple[str, bool, str | None], tuple[Expr, tuple[RegexWarning, ...]]] = {}
_BUILT_KEPT = 256


def _with_span(x, span: Span | None, done: dict[int, object] | None = None):
    """``x`` (an automaton or other grammar node, and every node in it) at ``span``: a built regex's
    nodes all carry its call's span. A node met twice (a large repetition's sub-automaton, read by
    its counted edge and by the starred rule edge of ``{n,}``) stays one node, as built."""
    done = {} if done is None else done
    if id(x) in done:
        return done[id(x)]
    if x.__class__ is tuple:
        out = tuple(_with_span(item, span, done) for item in x)
    elif (names := getattr(x.__class__, "__dataclass_fields__", None)) is None:
        return x
    elif "edges" in names:  # an automaton: most labels are byte ranges, which hold no span
        edges = tuple(e if e[1].__class__ is tuple else (e[0], _with_span(e[1], span, done), e[2]) for e in x.edges)
        out = replace(x, span=span, edges=edges)
    else:
        fields = {name: _with_span(getattr(x, name), span, done) for name in names if name != "span"}
        out = replace(x, span=span, **fields)
    done[id(x)] = out
    return out


def _regex_to_expr(
    pattern: str,
    json_string: bool,
    flags: str | None,
    warnings: list[RegexWarning],
    span: Span | None,
    deadline: Deadline | None = None,
) -> Expr:
    """:func:`regex_to_expr`, built."""
    case_insensitive = False
    if flags is not None:
        message = check_flags(flags)
        if message is not None:
            raise RegexError(message, 0, 0, in_flags=True)
        case_insensitive = "i" in flags
    parser = _Parser(pattern, json_string, case_insensitive, dot_all=flags is None or "s" in flags)
    root = parser.parse()
    try:
        automaton, raws = fsm.build(root, json_string=json_string, span=span, pattern=pattern, deadline=deadline)
    except fsm.RegexBuildError as error:
        if error.refused:  # the whole pattern: the automaton's states hold no spans
            raise RegexError(error.message, 0, len(pattern), refused=True) from None
        raise RegexError(error.message, *error.span) from None
    if json_string and parser.emptied and any(fsm.dead_end(raw, deadline=deadline) is not None for raw in raws):
        # A dead end: XGrammar's matcher accepts the text before the emptied atom and then
        # nothing. Kept exactly (the dead states stay, .dead_ends keeps their paths), with a warning.
        start, end = parser.emptied[0]
        automaton, _ = fsm.build(
            root, json_string=json_string, span=span, pattern=pattern, keep_dead=True, deadline=deadline
        )
        parser.warnings.append(
            RegexWarning(
                f"dead end: under json_string=true {pattern[start:end]!r} can match no character (no control "
                "character, '\"' or '\\'); XGrammar's matcher accepts the text before it and then nothing "
                "(cfgzip's masks do the same)",
                start,
                end,
            )
        )
    if warnings is not None:
        warnings.extend(parser.warnings)
    return automaton


def normalize(ranges) -> Ranges:
    """Sorted, merged inclusive ranges (as a tuple: regex units are hashable)."""
    return tuple(_normalize(ranges))


def complement(ranges: Ranges) -> Ranges:
    """Code points 0..U+10FFFF (surrogates included, as XGrammar) outside ``ranges``."""
    return tuple(_complement(tuple(ranges)))


def _fold_ascii_case(ranges: Ranges) -> Ranges:
    """Add the other ASCII case of every letter in ``ranges`` (XGrammar's ``(?i)``)."""
    extra = []
    for lo, hi in ranges:
        for first, last, shift in ((0x61, 0x7A, -0x20), (0x41, 0x5A, 0x20)):
            a, b = max(lo, first), min(hi, last)
            if a <= b:
                extra.append((a + shift, b + shift))
    return normalize(ranges + tuple(extra))


def _allowed_by_json_string(ranges: Ranges) -> bool:
    """Whether json_string leaves any code point of ``ranges`` (it removes ASCII bytes only)."""
    return bool(_intersect(ranges, complement(JSON_STRING_FORBIDDEN)))


@dataclass
class _Escape:
    """One escape: a single code point, or a (possibly negated) shorthand class."""

    code_point: int | None = None
    ranges: Ranges = ()
    negated: bool = False


class _Parser:
    """Recursive descent over the pattern with XGrammar's stack discipline; builds its IR.

    A group without ``|`` is a Bracket of its items, with ``|`` a Union of Brackets; the whole
    pattern likewise. Every atom is one Leaf (one character, escape, ``.`` or class), so that
    a quantifier applies to it alone, as in ``ParseRegexToIR``.
    """

    def __init__(self, pattern: str, json_string: bool, case_insensitive: bool, dot_all: bool) -> None:
        self.p = pattern
        self.pos = 0
        self.json_string = json_string
        self.case_insensitive = case_insensitive
        self.dot = _ALL if dot_all else _NOT_NEWLINE
        self.warnings: list[RegexWarning] = []
        self.emptied: list[tuple[int, int]] = []  # atoms json_string leaves with no character

    # ---- helpers -------------------------------------------------------------------------

    def error(self, message: str, start: int, end: int | None = None) -> RegexError:
        return RegexError(message, start, start + 1 if end is None else end)

    def warn(self, message: str, start: int, end: int | None = None) -> None:
        self.warnings.append(RegexWarning(message, start, start + 1 if end is None else end))

    def peek(self, delta: int = 0) -> str:
        i = self.pos + delta
        return self.p[i] if i < len(self.p) else ""

    def leaf(self, ranges: Ranges, start: int) -> fsm.Leaf:
        if self.json_string and not _allowed_by_json_string(ranges):
            self.emptied.append((start, self.pos))
        return fsm.Leaf(ranges, (start, self.pos))

    def single(self, cp: int, start: int) -> fsm.Leaf:
        """One literal code point (both ASCII cases under ``(?i)``: ``AddSingleCodepoint``)."""
        if self.case_insensitive and (0x41 <= cp <= 0x5A or 0x61 <= cp <= 0x7A):
            return self.leaf(_fold_ascii_case(((cp, cp),)), start)
        return self.leaf(((cp, cp),), start)

    # ---- grammar -------------------------------------------------------------------------

    def parse(self) -> fsm.Node:
        if self.p.startswith("(?i)"):
            self.case_insensitive, self.pos = True, 4
        root = self.alternation(depth=0)
        if self.pos < len(self.p):  # only a ')' stops the top level early
            raise self.error("Unmatched ')'", self.pos)
        return root

    def alternation(self, depth: int) -> fsm.Node:
        branches = [self.branch(depth)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.branch(depth))
        if len(branches) == 1:
            return fsm.Bracket(tuple(branches[0]))
        return fsm.Union(tuple(fsm.Bracket(tuple(b)) for b in branches))

    def branch(self, depth: int) -> list[fsm.Node]:
        items: list[fsm.Node] = []
        while self.pos < len(self.p):
            c, start = self.p[self.pos], self.pos
            if c == "|" or c == ")":
                break
            if c in "^$":
                self.anchor(c, depth, not items)
                continue
            if c in "*+?{":
                if not items:
                    what = "the repetition" if c == "{" else f"'{c}'"
                    raise self.error(f"There is nothing to repeat before {what}", start)
                items[-1] = self.quantify(items[-1])
                continue
            items.append(self.atom(depth))
        return items

    def anchor(self, c: str, depth: int, at_start: bool) -> None:
        """XGrammar skips every anchor; we warn where the pattern meant something by it."""
        start = self.pos
        self.pos += 1
        if c == "^" and depth == 0 and at_start:
            return
        if c == "$" and depth == 0:
            rest = self.p[self.pos :].lstrip("$")
            if not rest or rest.startswith("|"):
                return
        where = "start" if c == "^" else "end"
        message = (
            f"XGrammar ignores the anchor {c!r} here (it is not at the {where} of the pattern or of a "
            "top-level alternative): the pattern matches as if it were not written, and so does cfgzip"
        )
        self.warn(message, start)

    def quantify(self, item: fsm.Node) -> fsm.Node:
        c, start = self.p[self.pos], self.pos
        self.pos += 1
        if c in "*+?":
            if self.peek() == "?":  # lazy: the same language
                self.pos += 1
            return fsm.Quantified(c, item)
        low, high = self.repetition(start)
        if self.peek() == "?":
            self.pos += 1
        large = low > fsm.LARGE_REPEAT_THRESHOLD if high is None else high > fsm.LARGE_REPEAT_THRESHOLD
        if not large:
            return fsm.Repetition(item, low, high, (start, self.pos))
        # XGrammar compiles the sub-pattern as its own rule behind a counted repeat edge; a
        # nullable sub-pattern gets lower bound 0 (the same language).
        if fsm.is_nullable(item):
            low = 0
        if high is not None:
            return fsm.RepeatSubrule(item, low, high)
        sub = fsm.RepeatSubrule(item, low, low)
        tail = fsm.Quantified("*", fsm.SubruleRef(sub))
        return fsm.Bracket((sub, tail)) if low > 0 else tail

    def repetition(self, start: int) -> tuple[int, int | None]:
        """``{n}``, ``{n,}``, ``{n,m}`` after the ``{``; XGrammar allows spaces around the numbers."""

        def number(after: str) -> int:
            digits = ""
            while self.peek().isdigit() and self.peek().isascii():
                digits += self.peek()
                self.pos += 1
            if not digits:
                raise self.error(f"Invalid repetition count: expected a number {after}", start)
            if len(digits) > _MAX_REPEAT_DIGITS:
                raise self.error(f"Invalid repetition count: the count {digits} is too large", start)
            return int(digits)

        def spaces() -> None:
            while self.peek() == " ":
                self.pos += 1

        spaces()
        low = number("after '{'")
        spaces()
        if self.peek() == "}":
            self.pos += 1
            return low, low
        if self.peek() != ",":
            raise self.error("Invalid repetition count: expected ',' or '}' after the lower bound", start)
        self.pos += 1
        spaces()
        if self.peek() == "}":
            self.pos += 1
            return low, None
        high = number("or '}' after ','")
        if high < low:
            message = f"Invalid repetition count: the lower bound {low} is larger than the upper bound {high}"
            raise self.error(message, start)
        spaces()
        if self.peek() != "}":
            raise self.error("Invalid repetition count: expected '}' after the upper bound", start)
        self.pos += 1
        return low, high

    def atom(self, depth: int) -> fsm.Node:
        c, start = self.p[self.pos], self.pos
        if c == "[":
            return self.char_class()
        if c == "]":
            raise self.error("Unmatched ']'", start)
        if c == "(":
            return self.group(depth)
        if c == "\\":
            escape = self.escape(in_class=False)
            if escape.code_point is not None:
                return self.single(escape.code_point, start)
            ranges = _fold_ascii_case(escape.ranges) if self.case_insensitive else normalize(escape.ranges)
            return self.leaf(complement(ranges) if escape.negated else ranges, start)
        self.pos += 1
        if c == ".":
            return self.leaf(self.dot, start)
        return self.single(ord(c), start)

    def group(self, depth: int) -> fsm.Node:
        start = self.pos
        self.pos += 1
        if self.peek() == "?":
            modifier = self.peek(1)
            if not modifier:
                raise self.error("Group modifier is not finished", start)
            if modifier == ":":
                self.pos += 2
            elif modifier in "=!":
                end = self.skip_group(start)
                if end is None:
                    raise self.error("The parenthesis is not closed", start)
                message = (
                    f"XGrammar matches the lookahead assertion '(?{modifier}...)' as the empty string, ignoring "
                    "what it asserts, and so does cfgzip: the pattern matches more than it says"
                )
                self.warn(message, start, end)
                self.pos = end
                return fsm.Leaf(None, (start, end))  # what XGrammar puts in its place
            elif modifier == "<" or (modifier == "P" and self.peek(2) == "<"):
                name_start = self.pos + (2 if modifier == "<" else 3)
                if self.p[name_start : name_start + 1] in ("=", "!"):
                    raise self.error("Lookbehind assertion is not supported in regex", start)
                end = name_start
                while end < len(self.p) and (self.p[end].isascii() and (self.p[end].isalnum() or self.p[end] == "_")):
                    end += 1
                if end == name_start or end >= len(self.p) or self.p[end] != ">":
                    raise self.error("Invalid named capturing group", start)
                self.pos = end + 1
            else:
                raise self.error(f"Unsupported group modifier '(?{modifier}'", start)
        inner = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.error("The parenthesis is not closed", start)
        self.pos += 1
        return inner

    def skip_group(self, start: int) -> int | None:
        """The end of a lookahead group, skipped whole as XGrammar does (classes and escapes
        skipped inside); None when it is not closed."""
        depth, j = 1, start + 3
        while j < len(self.p) and depth:
            if self.p[j] == "\\":
                j += 2
            elif self.p[j] == "[":
                end = self.class_end(j)
                if end is None:
                    return None
                j = end
            else:
                depth += {"(": 1, ")": -1}.get(self.p[j], 0)
                j += 1
        return j if depth == 0 else None

    def escape(self, *, in_class: bool) -> _Escape:
        start = self.pos
        if self.pos + 1 >= len(self.p):
            raise self.error("Regex ends with a trailing backslash", start)
        letter = self.p[self.pos + 1]
        self.pos += 2
        if letter in _SINGLE_ESCAPES:
            return _Escape(_SINGLE_ESCAPES[letter])
        if letter in _SHORTHAND_LETTERS:
            ranges, negated = _shorthands()[letter]
            return _Escape(ranges=ranges, negated=negated)
        if letter == "b":
            if in_class:
                return _Escape(0x08)
            raise self.error("Word boundary assertion \\b is not supported in regex", start)
        if letter == "B":
            raise self.error("Word boundary assertion \\B is not supported in regex", start)
        if letter in "pP":
            raise self.error("Unicode property escape \\p / \\P is not supported in regex", start)
        if letter == "k" or letter in "123456789":
            raise self.error(f"Backreference \\{letter} is not supported in regex", start)
        if letter == "x":
            digits = self.p[self.pos : self.pos + 2]
            if len(digits) < 2 or not all(d in _HEX for d in digits):
                raise self.error("\\x must be followed by two hexadecimal digits in regex", start)
            self.pos += 2
            return _Escape(int(digits, 16))
        if letter == "u":
            if self.peek() == "{":
                close = self.p.find("}", self.pos + 1)
                digits = self.p[self.pos + 1 : close] if close != -1 else ""
                if close == -1 or not 1 <= len(digits) <= 6 or not all(d in _HEX for d in digits):
                    raise self.error("\\u{...} must contain one to six hexadecimal digits in regex", start)
                if int(digits, 16) > MAX_CODE_POINT:
                    raise self.error("\\u{...} escape is beyond the Unicode range in regex", start)
                self.pos = close + 1
                return _Escape(int(digits, 16))
            digits = self.p[self.pos : self.pos + 4]
            if len(digits) < 4 or not all(d in _HEX for d in digits):
                raise self.error("\\u must be followed by four hexadecimal digits in regex", start)
            self.pos += 4
            return _Escape(int(digits, 16))
        if letter == "c":
            following = self.peek()
            if not (following.isascii() and following.isalpha()):
                raise self.error("\\c must be followed by a letter in regex", start)
            self.pos += 1
            return _Escape(ord(following) & 0x1F)
        return _Escape(ord(letter))  # any other escaped character is itself

    def char_class(self) -> fsm.Leaf:
        start = self.pos
        end = self.class_end(start)
        if end is None:
            raise self.error("Unclosed '['", start)
        self.pos = start + 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        content_end = end - 1  # the closing ']'
        if self.pos == content_end:
            raise self.error("Empty character class is not allowed in regex", start)
        ranges: list[tuple[int, int]] = []
        while self.pos < content_end:
            unit = self.class_unit()
            if unit.code_point is None:  # \d and friends: never a range end; a following '-' is literal
                ranges += complement(normalize(unit.ranges)) if unit.negated else unit.ranges
                continue
            if self.peek() == "-" and self.pos + 1 < content_end:
                self.pos += 1
                high = self.class_unit()
                if high.code_point is None:
                    raise self.error("Invalid character range endpoint in regex character class", start, end)
                if high.code_point < unit.code_point:
                    message = "Invalid character range (lower bound exceeds upper bound) in regex character class"
                    raise self.error(message, start, end)
                ranges.append((unit.code_point, high.code_point))
            else:
                ranges.append((unit.code_point, unit.code_point))
        self.pos = end
        result = _fold_ascii_case(tuple(ranges)) if self.case_insensitive else normalize(ranges)
        return self.leaf(complement(result) if negated else result, start)

    def class_unit(self) -> _Escape:
        if self.peek() == "\\":
            return self.escape(in_class=True)
        self.pos += 1
        return _Escape(ord(self.p[self.pos - 1]))

    def class_end(self, start: int) -> int | None:
        """Offset just past the ``]`` closing the class at ``start`` (XGrammar's SkipCharacterClass)."""
        j = start + 1
        if j < len(self.p) and self.p[j] == "^":
            j += 1
        while j < len(self.p):
            if self.p[j] == "\\":
                j += 2
            elif self.p[j] == "]":
                return j + 1
            else:
                j += 1
        return None


def _intersect(a: Ranges, b: Ranges) -> list[tuple[int, int]]:
    out = []
    for lo, hi in a:
        for lo2, hi2 in b:
            if max(lo, lo2) <= min(hi, hi2):
                out.append((max(lo, lo2), min(hi, hi2)))
    return out
