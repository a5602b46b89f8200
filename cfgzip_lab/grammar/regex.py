"""XGrammar's ``Regex("...", json_string=...)`` → grammar AST, with XGrammar's exact meaning.

XGrammar 0.2.8 compiles a ``Regex`` macro into an automaton (``RegexFSMBuilder`` in
``cpp/fsm_builder.cc``; JSON Schema ``pattern`` s print as such macros). This module reads the
same dialect into the AST the EBNF front end builds (Literal, CharClass, Sequence, Choice,
Repeat), so lowering, GNF and classing need nothing new. Every fact below was checked by
feeding bytes to a real ``GrammarMatcher`` (``tests/test_regex.py`` pins them):

- The whole pattern must match (``^``/``$`` add nothing). Characters are code points matched
  as UTF-8, like EBNF classes; ``.`` is any code point U+0000..U+10FFFF, newline included.
- Escapes: ``\\n \\t \\r \\f \\v \\a \\e \\0`` (``\\012`` is ``\\0`` then ``12``), ``\\xHH``
  (exactly two digits), ``\\uHHHH``, ``\\u{H..H}`` (1-6 digits, at most U+10FFFF), ``\\cX``
  (a letter, code ``X & 31``), any other character escaped is itself (``\\U`` is ``U``).
  ``\\d`` = ``[0-9]``, ``\\w`` = ``[0-9A-Za-z_]``, ``\\s`` = ``[\\t-\\r ]`` (no U+00A0, no
  Unicode spaces) and the negated ``\\D \\W \\S`` are their complements over all code points.
- Classes: ``[...]``/``[^...]``, ranges ``a-z``, escapes as above plus ``\\b`` (backspace);
  ``-`` is literal first, last or after a ``\\d``-like escape; ``[`` is literal inside;
  the first ``]`` always closes, so ``[]a]`` is the (refused) empty class then ``a]``.
- Quantifiers ``* + ? {n} {n,} {n,m}`` (spaces allowed inside braces, counts up to 9 digits),
  each optionally lazy (``*?``: same language); a quantifier may follow another (``a**``).
- Groups ``( )``, ``(?: )``, named ``(?<n> )``/``(?P<n> )``; alternation ``|`` with empty
  branches allowed (``a|``, ``()``). A leading ``(?i)`` makes ASCII letters case-insensitive.
- ``json_string=true`` (what JSON Schema patterns use) removes U+0000..U+001F, ``"`` and ``\\``
  from every character the pattern can match: the pattern describes raw characters of the
  JSON string body and those would need escapes. It is *not* escape-aware: no pattern ever
  matches ``\\"`` under it. Where that leaves an atom with no character after a part that
  consumed text (``a"b``), XGrammar's matcher still accepts the text before it (a dead end):
  such a pattern is refused, as token classes cannot reproduce a dead end.

Refused (a :class:`RegexError` with ``refused=True``), because XGrammar gives them a meaning
the pattern's author did not write and cfgzip will not guess: lookaheads ``(?=``/``(?!``
(XGrammar silently matches them as empty), and ``^``/``$`` anywhere but at the very start or
end of the pattern or of a top-level alternative (XGrammar ignores them: ``a^b`` matches
``ab``). Everything XGrammar itself rejects (lookbehind, backreferences, ``\\b``, ``\\p{..}``,
unbalanced brackets, a quantifier with nothing before it...) is an error here too, with
XGrammar's reason and the position in the pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lower import MAX_CODE_POINT
from .lower import complement as _complement
from .lower import normalize as _normalize
from .tree import CharClass, Choice, Expr, Literal, Repeat, Sequence

__all__ = ["RegexError", "regex_to_expr", "JSON_STRING_FORBIDDEN", "MAX_CODE_POINT"]

#: What ``json_string=true`` removes from every character the regex matches.
JSON_STRING_FORBIDDEN = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_MAX_REPEAT_DIGITS = 9  # XGrammar: "10^9 fits in an int"

_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20))
_SHORTHANDS = {"d": (_DIGIT, False), "D": (_DIGIT, True), "w": (_WORD, False), "W": (_WORD, True)}
_SHORTHANDS |= {"s": (_SPACE, False), "S": (_SPACE, True)}
_SINGLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B, "0": 0x00}
_HEX = "0123456789abcdefABCDEF"

Ranges = tuple[tuple[int, int], ...]


@dataclass
class RegexError(Exception):
    """A regex cfgzip cannot use: ``start``/``end`` are offsets in the pattern (code points).

    ``refused`` is True for constructs XGrammar accepts but gives a meaning cfgzip will not
    reproduce (see the module docstring); False for patterns XGrammar rejects as well.
    """

    message: str
    start: int
    end: int
    refused: bool = False

    def __str__(self) -> str:
        return f"{self.message} (at position {self.start + 1} of the pattern)"


def regex_to_expr(pattern: str, *, json_string: bool = False) -> Expr:
    """The AST for ``Regex(pattern, json_string=...)`` as XGrammar 0.2.8 matches it.

    Parameters
    ----------
    pattern : str
        The regex, as code points (the EBNF string literal already unescaped).
    json_string : bool, keyword-only
        XGrammar's ``json_string`` flag: no control character, ``"`` or ``\\`` is matched.

    Raises
    ------
    RegexError
        With the position in ``pattern`` and XGrammar's reason, or cfgzip's for a refusal.

    Examples
    --------
    >>> regex_to_expr("a{2}").min
    2
    """
    return _Parser(pattern, json_string).parse()


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


@dataclass
class _Escape:
    """One escape: a single code point, or a (possibly negated) shorthand class."""

    code_point: int | None = None
    ranges: Ranges = ()
    negated: bool = False


class _Parser:
    """Recursive descent over the pattern, accepting exactly what XGrammar's stack parser accepts."""

    def __init__(self, pattern: str, json_string: bool) -> None:
        self.p = pattern
        self.pos = 0
        self.json_string = json_string
        self.case_insensitive = False
        # The first refused construct: raised only once the whole pattern has parsed, so that a
        # pattern XGrammar rejects anyway gets XGrammar's reason rather than our refusal.
        self.refusal: RegexError | None = None
        self.emptied: list[tuple[int, int]] = []  # atoms json_string left with no character

    # ---- helpers -------------------------------------------------------------------------

    def error(self, message: str, start: int, end: int | None = None, *, refused: bool = False) -> RegexError:
        return RegexError(message, start, start + 1 if end is None else end, refused)

    def peek(self, delta: int = 0) -> str:
        i = self.pos + delta
        return self.p[i] if i < len(self.p) else ""

    def char_set(self, ranges: Ranges) -> Expr:
        """A class atom, with ``json_string``'s forbidden characters taken out."""
        ranges = normalize(ranges)
        if self.json_string:
            ranges = normalize(_intersect(ranges, complement(JSON_STRING_FORBIDDEN)))
        return CharClass(ranges)

    def single(self, cp: int) -> Expr:
        """One literal code point (both ASCII cases under ``(?i)``)."""
        if self.case_insensitive and (0x41 <= cp <= 0x5A or 0x61 <= cp <= 0x7A):
            return self.char_set(_fold_ascii_case(((cp, cp),)))
        if self.json_string and any(lo <= cp <= hi for lo, hi in JSON_STRING_FORBIDDEN):
            return CharClass(())  # matches nothing: the empty set
        return Literal(chr(cp))

    # ---- grammar -------------------------------------------------------------------------

    def parse(self) -> Expr:
        if self.p.startswith("(?i)"):
            self.case_insensitive, self.pos = True, 4
        expr = self.alternation(depth=0)
        if self.pos < len(self.p):  # only a ')' stops the top level early
            raise self.error("Unmatched ')'", self.pos)
        if self.refusal is not None:
            raise self.refusal
        if self.emptied and _has_dead_end(expr):
            start, end = self.emptied[0]
            message = (
                f"cfgzip cannot reproduce the language of {self.p[start:end]!r} under json_string=true exactly: "
                "it can match no character there (no control character, '\"' or '\\'), and XGrammar's matcher "
                "still accepts the text before it, a dead end that token classes cannot reproduce"
            )
            raise self.error(message, start, end, refused=True)
        return expr

    def refuse(self, message: str, start: int, end: int | None = None) -> None:
        if self.refusal is None:
            self.refusal = self.error(message, start, end, refused=True)

    def alternation(self, depth: int) -> Expr:
        branches = [self.branch(depth)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.branch(depth))
        return branches[0] if len(branches) == 1 else Choice(tuple(branches))

    def branch(self, depth: int) -> Expr:
        items: list[Expr] = []
        at_start = True  # nothing consumable since the start of the pattern or a top-level '|'
        while self.pos < len(self.p):
            c, start = self.p[self.pos], self.pos
            if c == "|" or c == ")":
                break
            if c in "^$":
                self.anchor(c, depth, at_start and not items)
                continue
            if c in "*+?{":
                if not items:
                    what = "the repetition" if c == "{" else f"'{c}'"
                    raise self.error(f"There is nothing to repeat before {what}", start)
                items[-1] = self.quantify(items[-1])
                continue
            items.append(self.atom(depth))
            at_start = False
        return _sequence(items)

    def anchor(self, c: str, depth: int, at_start: bool) -> None:
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
            f"cfgzip cannot reproduce the language of the anchor {c!r} here exactly: XGrammar ignores an anchor "
            f"that is not at the {where} of the pattern (or of a top-level alternative), so it would match "
            "strings the pattern forbids"
        )
        self.refuse(message, start)

    def quantify(self, item: Expr) -> Expr:
        c, start = self.p[self.pos], self.pos
        self.pos += 1
        if c == "*":
            low, high = 0, None
        elif c == "+":
            low, high = 1, None
        elif c == "?":
            low, high = 0, 1
        else:
            low, high = self.repetition(start)
        if self.peek() == "?":  # lazy: the same language
            self.pos += 1
        return Repeat(item, low, high)

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

    def atom(self, depth: int) -> Expr:
        start = self.pos
        expr = self._atom(depth)
        if isinstance(expr, CharClass) and not expr.ranges:  # json_string took every character
            self.emptied.append((start, self.pos))
        return expr

    def _atom(self, depth: int) -> Expr:
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
                return self.single(escape.code_point)
            ranges = _fold_ascii_case(escape.ranges) if self.case_insensitive else normalize(escape.ranges)
            return self.char_set(complement(ranges) if escape.negated else ranges)
        self.pos += 1
        if c == ".":
            return self.char_set(((0, MAX_CODE_POINT),))
        return self.single(ord(c))

    def group(self, depth: int) -> Expr:
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
                    "cfgzip cannot reproduce the language of a lookahead assertion exactly: XGrammar matches "
                    f"'(?{modifier}...)' as the empty string, ignoring what it asserts"
                )
                self.refuse(message, start, end)
                self.pos = end
                return Literal("")  # what XGrammar puts in its place
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
        if letter in _SHORTHANDS:
            ranges, negated = _SHORTHANDS[letter]
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

    def char_class(self) -> Expr:
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
        return self.char_set(complement(result) if negated else result)

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


def _is_empty(expr: Expr) -> bool:
    """The language of ``expr`` is empty (only json_string makes such atoms)."""
    if isinstance(expr, CharClass):
        return not expr.ranges
    if isinstance(expr, Sequence):
        return any(_is_empty(item) for item in expr.items)
    if isinstance(expr, Choice):
        return all(_is_empty(option) for option in expr.options)
    if isinstance(expr, Repeat):
        return expr.min > 0 and _is_empty(expr.item)
    return False


def _has_dead_end(expr: Expr) -> bool:
    """Whether XGrammar's automaton for ``expr`` can consume a character and then never finish.

    json_string removes characters from the automaton's edges without pruning the states left
    with no way out: ``a"b`` accepts the prefix ``a``. Our grammar has no such prefixes (GNF
    drops useless symbols), so a pattern with a dead end is refused. A sequence dead-ends when
    an item before its first empty item can consume a character, or when an item up to that
    one dead-ends inside; a choice or a repetition when a part of it does.
    """
    if isinstance(expr, Sequence):
        first_empty = next((i for i, item in enumerate(expr.items) if _is_empty(item)), len(expr.items))
        reachable = expr.items[: first_empty + 1]
        if any(_has_dead_end(item) for item in reachable):
            return True
        return first_empty < len(expr.items) and any(_consumes(item) for item in expr.items[:first_empty])
    if isinstance(expr, Choice):
        return any(_has_dead_end(option) for option in expr.options)
    if isinstance(expr, Repeat):
        return expr.max != 0 and _has_dead_end(expr.item)
    return False


def _consumes(expr: Expr) -> bool:
    """The language of ``expr`` (non-empty) holds a non-empty string."""
    if isinstance(expr, Literal):
        return bool(expr.text)
    if isinstance(expr, CharClass):
        return bool(expr.ranges)
    if isinstance(expr, Sequence):
        return not _is_empty(expr) and any(_consumes(item) for item in expr.items)
    if isinstance(expr, Choice):
        return any(_consumes(option) for option in expr.options if not _is_empty(option))
    assert isinstance(expr, Repeat)
    return expr.max != 0 and _consumes(expr.item)


def _intersect(a: Ranges, b: Ranges) -> list[tuple[int, int]]:
    out = []
    for lo, hi in a:
        for lo2, hi2 in b:
            if max(lo, lo2) <= min(hi, hi2):
                out.append((max(lo, lo2), min(hi, hi2)))
    return out


def _sequence(items: list[Expr]) -> Expr:
    """Items in order, adjacent literals merged (``"ab"`` rather than ``"a" "b"``)."""
    merged: list[Expr] = []
    for item in items:
        if isinstance(item, Literal) and merged and isinstance(merged[-1], Literal):
            merged[-1] = Literal(merged[-1].text + item.text)
        else:
            merged.append(item)
    if not merged:
        return Literal("")
    return merged[0] if len(merged) == 1 else Sequence(tuple(merged))
