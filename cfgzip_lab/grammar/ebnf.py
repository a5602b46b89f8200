"""XGrammar's EBNF dialect → grammar AST, with diagnostics an editor can show.

CFGzip must class tokens for exactly the language XGrammar enforces, so this front
end reads the dialect ``xgrammar.Grammar.from_ebnf`` reads (checked by experiment
against xgrammar 0.2.8, whose parser is ``cpp/grammar_parser.cc``) and refuses what
it cannot reproduce instead of approximating it. The tokens and the parser are in
:mod:`.ebnf_syntax`; this module holds the semantic actions and the whole-grammar checks.

The dialect, as XGrammar reads it:

- ``name ::= body``; a rule ends where the next ``name ::=`` starts, so bodies span
  lines freely, but a rule name must be the first token on its line. Names use
  letters, digits (not first), ``_``, ``-`` and ``.``. ``#`` starts a comment.
- ``|``, juxtaposition, ``( )`` (``()`` is ε), ``*`` ``+`` ``?`` ``{m}`` ``{m,}``
  ``{m,n}`` and ``{m,-1}`` (unbounded, as XGrammar's printer writes it). There is
  no ``{,n}``, no single-quoted string, and a quantifier cannot follow another.
- Strings ``"..."`` (one line) accept the escapes ``\\n \\t \\r \\a \\b \\e \\f \\v
  \\0 \\" \\' \\? \\/ \\\\``, ``\\uHHHH``, ``\\UHHHHHHHH`` and ``\\xH...``. Classes
  ``[...]``/``[^...]`` accept those plus ``\\$ \\( \\) \\* \\+ \\- \\. \\[ \\] \\^ \\{
  \\| \\}``; ``\\d \\s \\w`` and friends are rejected. A ``-`` is a range only between
  two members (``[a-]`` holds ``a`` and ``-``); ``[]`` is the empty set.
- ``\\x`` takes *every* following hex digit (``"\\x41BC"`` is U+41BC, not ``"ABC"``
  as in llama.cpp's GBNF), and the number is a code point: ``"\\xff"`` and
  ``[\\xff]`` match the UTF-8 bytes C3 BF, never the byte FF (verified by feeding
  bytes to a ``GrammarMatcher``). Literal text in the AST therefore holds code
  points; a ``\\x`` escape with more than two digits gets a warning.
- ``rule ::= body (= lookahead)``: a lookahead assertion, only at the end of a rule.
- Rule attributes ``name[max_tokens=N]`` and ``name[capture]``/``[capture="c"]``.
- Macros ``TagDispatch(...)``, ``TokenTagDispatch(...)``, ``Token(...)``,
  ``ExcludeToken(...)``, ``Regex(...)``: a macro name is always a call, never a rule
  reference. ``true``/``false`` are reserved words.

``Regex("...", json_string=true|false)`` (how XGrammar prints a JSON Schema ``pattern``) is
lowered exactly by :mod:`.regex`; a regex XGrammar rejects, or a construct it gives a meaning
cfgzip will not reproduce (a lookahead inside the regex, an anchor in the middle), is an error
at its character in the text. cfgzip refuses (error) the other macros, ``<...>`` token
references and ``max_tokens`` (see ``_REFUSED_BECAUSE``), and drops (warning) rule-level
lookaheads ``(= ...)`` and ``capture``, which leave the language alone or only restrict it. Code points above U+10FFFF and
repetition bounds above 2**31-1 are errors: XGrammar accepts them but silently
produces a different grammar (an invalid code point, a wrapped 32-bit bound).
Surrogate code points (``"\\uD800"``) are kept: XGrammar matches their 3-byte
encoding and the lowering encodes them with ``surrogatepass``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import NamedTuple

from .diagnostics import Diagnostic, GrammarError, Severity, position_of
from .ebnf_syntax import (
    ELEMENT_STARTS,
    MACROS,
    NAME_PATTERN,
    QUANTIFIERS,
    Nested,
    ParseFailure,
    Tok,
    parse_chunk,
    tokens,
)
from .regex import RegexError, RegexWarning, regex_to_expr
from .tree import (
    Automaton,
    CharClass,
    Choice,
    Expr,
    GrammarAST,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    Span,
)

__all__ = [
    "parse_ebnf",
    "check_ebnf",
    "decode_ebnf_string",
    "XGRAMMAR_MACROS",
    "MAX_REPEAT_BOUND",
    "REFUSAL",
    "LOOKAHEAD_DROPPED",
    "CAPTURE_DROPPED",
]

XGRAMMAR_MACROS = MACROS
MAX_REPEAT_BOUND = 2**31 - 1  # XGrammar stores bounds as int32 and wraps larger ones
_MAX_CODE_POINT = 0x10FFFF
_RESERVED_WORDS = ("true", "false")  # XGrammar lexes them as booleans, never as names

# A line that starts a rule. Used only to cut the text into one chunk per rule so that
# a syntax error in one rule still lets every other rule be checked (the parser stops at the
# first error). Strings, classes and comments never span lines, so a line matching this
# is a rule head in XGrammar too.
_RULE_HEAD = re.compile(rf"^[ \t]*({NAME_PATTERN})(?:\[[^\]\r\n]*\])?[ \t]*::=", re.MULTILINE)

_STRING_ESCAPES = {
    "'": "'", '"': '"', "?": "?", "\\": "\\", "/": "/", "0": "\0",
    "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_CLASS_ESCAPES = _STRING_ESCAPES | {c: c for c in "$()*+-.[]^{|}"}
_CLASS_SHORTHANDS = "dDsSwW"  # regex shorthands that XGrammar rejects inside classes

# One character of a string or class body: an escape (``\x`` greedy, as in XGrammar)
# or a plain character. The STRING and CHAR_CLASS terminals guarantee that every
# backslash has a character after it; "\x" without digits falls to the "." branch
# and is reported as a bad escape.
_CHAR = r"\\(?:x[0-9A-Fa-f]+|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)|[^\\]"
_CHAR_RE = re.compile(_CHAR, re.DOTALL)
# A class member: a range ``lo-hi`` (either end may be an unescaped ``-``) tried before
# a single character, left to right; this gives XGrammar's reading of ``[a-c-e]`` as
# ``a-c``, ``-``, ``e`` and of ``[a-]`` as ``a``, ``-``.
_CLASS_MEMBER_RE = re.compile(rf"(?P<lo>{_CHAR})-(?P<hi>{_CHAR})|(?P<one>{_CHAR})", re.DOTALL)

# One attribute of ``name[...] ::=`` followed by a comma or the end of the block.
_ATTRIBUTE_RE = re.compile(r'\s*(?:(?P<max_tokens>max_tokens\s*=\s*[0-9]+)|capture(?:\s*=\s*"[^"\\\r\n]*")?)\s*(?:,|$)')

REFUSAL = "cfgzip cannot reproduce the language of {what} exactly; ignoring it would make token classes unsound"
# Why each refused construct is out of reach, appended to REFUSAL.
_REFUSED_BECAUSE = {
    "TagDispatch": "it scans free text for tags with an automaton XGrammar builds itself",
    "TokenTagDispatch": "it dispatches on token ids, not on bytes",
    "Token": "it matches token ids, not bytes",
    "ExcludeToken": "it excludes token ids, not bytes",
    "<token>": "it matches a token id, not bytes (and XGrammar's EBNF has no token references)",
    "max_tokens": "it bounds the number of tokens, which depends on the tokenizer, not on bytes",
}
LOOKAHEAD_DROPPED = (
    "lookahead assertion dropped: it only restricts the language; the lossless verifier checks the classes"
)
CAPTURE_DROPPED = "capture attribute dropped: it names a match and leaves the language unchanged"

# How a syntax error names what the parser wanted, in the order it lists them.
_EXPECTED_WORDS = {
    "ELEMENT": "an element (string, character class, rule name or '(')",
    "QUANTIFIER": "a quantifier",
    "RULE_NAME": "a rule definition 'name ::= ...'",
    "ATTRIBUTES": "a rule attribute block",
    "ASSIGN": "'::='",
    "INT": "an integer",
    "NAME": "a name",
    "STRING": "a string",
    "COMMA": "','",
    "EQUAL": "'='",
    "VBAR": "'|'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LOOKAHEAD": "a lookahead '(= ...)'",
    "$END": "the end of the grammar",
}
_UNEXPECTED_CHARACTER = {
    '"': "unterminated string literal (a string must close on its own line)",
    "[": "unterminated character class (a class must close on its own line)",
    "'": "single-quoted strings are not part of XGrammar's EBNF; use double quotes",
    ":": "expected '::='",
}


class _Quantifier(NamedTuple):
    min: int
    max: int | None
    end: int  # offset just past the quantifier


class _Lookahead(NamedTuple):
    body: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class _Definition:
    """A parsed rule plus what the AST drops but the checks still need."""

    rule: Rule
    name_span: Span
    lookahead: Expr | None
    macro_refs: tuple[RuleRef, ...]  # rule names passed to refused macros such as TagDispatch


def parse_ebnf(text: str, *, root: str = "root", source: str = "<grammar>") -> GrammarAST:
    """Parse an XGrammar EBNF grammar into a :class:`GrammarAST`.

    Parameters
    ----------
    text : str
        The grammar, in the dialect ``xgrammar.Grammar.from_ebnf`` accepts.
    root : str, keyword-only
        The start rule; it may also be referenced inside bodies.
    source : str, keyword-only
        A file name for rendered diagnostics.

    Returns
    -------
    GrammarAST
        Rules in source order; warnings (unreachable rules, dropped lookaheads and
        attributes, long ``\\x`` escapes) in ``warnings``.

    Raises
    ------
    GrammarError
        With every diagnostic found (errors and warnings) when there is any error,
        including constructs cfgzip refuses because it cannot reproduce them exactly.

    Examples
    --------
    >>> parse_ebnf('root ::= "a" [0-9]*').rules["root"].body.items[1].min
    0
    """
    ast, diagnostics = _analyse(text, root)
    if any(d.severity == "error" for d in diagnostics):
        raise GrammarError(diagnostics, text, source)
    ast.warnings = diagnostics
    return ast


def check_ebnf(text: str, *, root: str = "root", source: str = "<grammar>") -> list[Diagnostic]:
    """Every error and warning for ``text``, by position; never raises (for a live editor).

    ``source`` is accepted for symmetry with :func:`parse_ebnf`; diagnostics do not
    store it, views pass it to ``Diagnostic.render``.
    """
    del source
    try:
        return _analyse(text, root)[1]
    except Exception as error:  # a front-end bug must not take the editor down
        return [Diagnostic(1, 1, f"internal error in the EBNF front end: {error!r}")]


def _analyse(text: str, root: str) -> tuple[GrammarAST, list[Diagnostic]]:
    """Parse chunk by chunk, then run the whole-grammar checks."""
    diagnostics: list[Diagnostic] = []
    definitions: list[_Definition] = []
    broken_names: set[str] = set()  # defined in a chunk that did not parse
    for start, end in _rule_chunks(text):
        builder = _Builder(text)
        try:
            parse_chunk(tokens(text, start, end), builder)
        except ParseFailure as error:  # the chunk's own diagnostics and rules go, as lark's did
            diagnostics.append(_syntax_diagnostic(text, end, error))
            broken_names.update(m.group(1) for m in _RULE_HEAD.finditer(text, start, end))
            continue
        diagnostics += builder.diagnostics
        definitions += builder.definitions
    rules = _check_rules(text, root, definitions, broken_names, diagnostics)
    if not any(d.severity == "error" for d in diagnostics):
        _note_left_recursion(text, rules, diagnostics)
    diagnostics.sort(key=lambda d: (d.line, d.column))
    return GrammarAST(rules=rules, root=root, text=text), diagnostics


def decode_ebnf_string(body: str) -> str:
    """The text of an EBNF string literal's body (between the quotes), as XGrammar reads it;
    a bad escape is dropped (the front end reports it where it matters)."""
    out = []
    for match in _CHAR_RE.finditer(body):
        piece = match.group()
        if not piece.startswith("\\"):
            out.append(piece)
        elif piece[1:2] in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[piece[1]])
        elif len(piece) > 2 and int(piece[2:], 16) <= _MAX_CODE_POINT:
            out.append(chr(int(piece[2:], 16)))
    return "".join(out)


def _rule_chunks(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` offsets: the text before the first rule head, then one per head."""
    cuts = [0] + [m.start() for m in _RULE_HEAD.finditer(text) if m.start() > 0] + [len(text)]
    return list(zip(cuts, cuts[1:]))


def _diagnostic(text: str, span: Span, message: str, severity: Severity = "error") -> Diagnostic:
    line, column = position_of(text, span[0])
    return Diagnostic(line, column, message, severity, span)


def _syntax_diagnostic(text: str, end: int, error: ParseFailure) -> Diagnostic:
    """Say what the parser found and what it expected, at the offending position in ``text``
    (``end``: where the chunk ends)."""
    token = error.token
    if token.type == "ERROR":
        at = token.start_pos
        char = text[at]
        message = _UNEXPECTED_CHARACTER.get(char, f"unexpected character {char!r}")
        if text.startswith(("//", "/*"), at):
            message = f"unexpected {text[at : at + 2]!r}: comments start with '#' in XGrammar's EBNF (to the line end)"
            return _diagnostic(text, (at, at + 2), message)
        return _diagnostic(text, (at, at + 1), message)
    if token.type == "$END":  # placed at the end of the last token, as lark placed it
        at = token.start_pos
        last = end == len(text)
        found = "end of the grammar" if last else "end of the rule (the next rule starts below)"
        span = (at, at)
    else:
        span = (token.start_pos, token.end_pos)
        if token.type == "ASSIGN":
            return _diagnostic(text, span, "'::=' needs a rule name right before it")
        found = f"{token.value!r}"
    expected = _describe_expected(set(error.expected))
    return _diagnostic(text, span, f"unexpected {found}; expected {expected}")


def _describe_expected(expected: set[str]) -> str:
    if ELEMENT_STARTS <= expected:
        expected = (expected - ELEMENT_STARTS) | {"ELEMENT"}
    if QUANTIFIERS <= expected:
        expected = (expected - QUANTIFIERS) | {"QUANTIFIER"}
    words = [word for name, word in _EXPECTED_WORDS.items() if name in expected]
    words += sorted(name for name in expected if name not in _EXPECTED_WORDS)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


_Located = Tok | Expr | Span


class _Builder:
    """The parser's semantic actions: AST nodes whose spans are offsets in the whole text.

    Problems local to one construct (bad escapes, bounds, refused constructs) become
    diagnostics here and the node is replaced by a placeholder so that checking goes on.
    The parser calls these bottom-up, left to right, so diagnostics keep the text's order.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.diagnostics: list[Diagnostic] = []
        self.definitions: list[_Definition] = []
        self._macro_refs: list[RuleRef] = []  # of the rule being built

    @staticmethod
    def _span(first: _Located, last: _Located | None = None) -> Span:
        """From the start of ``first`` to the end of ``last`` (default ``first``), in the text."""
        if last is None:
            last = first
        if isinstance(first, Tok):
            start = first.start_pos
        elif isinstance(first, tuple):
            start = first[0]
        else:
            start = first.span[0]  # type: ignore[index]
        if isinstance(last, Tok):
            return start, last.end_pos
        if isinstance(last, tuple):
            return start, last[1]
        return start, last.span[1]  # type: ignore[index]

    def _report(self, span: Span, message: str, severity: Severity = "error") -> None:
        self.diagnostics.append(_diagnostic(self.text, span, message, severity))

    def _refuse(self, what: str, span: Span) -> Literal:
        why = _REFUSED_BECAUSE[what.split("(")[0]]
        self._report(span, f"{REFUSAL.format(what=what)}: {why}")
        return Literal("", span)

    # ---- atoms -------------------------------------------------------------------------

    def literal(self, token: Tok) -> Literal:
        span = (token.start_pos, token.end_pos)
        body = token.value[1:-1]
        if "\\" not in body:  # no escapes: the text is the body (most literals)
            return Literal(body, span)
        code_points = self._decode(body, span[0] + 1, _STRING_ESCAPES)
        return Literal("".join(map(chr, code_points)), span)

    def char_class(self, token: Tok) -> CharClass:
        span = (token.start_pos, token.end_pos)
        body, start = token.value[1:-1], span[0] + 1
        negated = body.startswith("^")
        if negated:
            body, start = body[1:], start + 1
        ranges = []
        for member in _CLASS_MEMBER_RE.finditer(body):
            if member.group("one") is not None:
                cp = self._decode_one(member, "one", start)
                ranges.append((cp, cp))
                continue
            lo, hi = self._decode_one(member, "lo", start), self._decode_one(member, "hi", start)
            if lo > hi:
                where = (start + member.start(), start + member.end())
                message = f"inverted character range {member.group()!r}: U+{lo:04X} > U+{hi:04X}"
                self._report(where, message)
            ranges.append((lo, hi))
        return CharClass(tuple(ranges), negated, span)

    def _decode_one(self, member: re.Match[str], group: str, start: int) -> int:
        """The code point of one class character; 0 stands in for a reported bad escape."""
        piece = member.group(group)
        if len(piece) == 1:
            return ord(piece)
        code_points = self._decode(piece, start + member.start(group), _CLASS_ESCAPES)
        return code_points[0] if code_points else 0

    def _decode(self, body: str, start: int, escapes: dict[str, str]) -> list[int]:
        """Code points of a string or class body; bad escapes are reported and skipped."""
        return self._decode_located(body, start, escapes)[0]

    def _decode_located(self, body: str, start: int, escapes: dict[str, str]) -> tuple[list[int], list[int]]:
        """:meth:`_decode` plus the text offset where each code point is written, and one past
        the last (so that an offset in the decoded string maps back into the grammar text)."""
        out: list[int] = []
        offsets: list[int] = []
        for match in _CHAR_RE.finditer(body):
            piece, at = match.group(), start + match.start()
            where = (at, at + len(piece))
            del offsets[len(out) :]  # a skipped (bad) escape leaves no code point
            offsets.append(at)
            if not piece.startswith("\\"):
                out.append(ord(piece))
            elif piece[1:2] in escapes:
                out.append(ord(escapes[piece[1]]))
            elif len(piece) > 2:  # \x..., \uHHHH, \UHHHHHHHH
                cp = int(piece[2:], 16)
                if cp > _MAX_CODE_POINT:
                    self._report(where, f"escape {piece} is beyond U+10FFFF, the last code point")
                    continue
                if piece[1] == "x" and len(piece) > 4:
                    message = (
                        f"{piece} is read as the code point U+{cp:04X}: XGrammar's \\x takes every "
                        "following hex digit (split the string if you meant a byte, then text)"
                    )
                    self._report(where, message, "warning")
                out.append(cp)
            else:
                self._report(where, _bad_escape_message(piece, escapes))
        del offsets[len(out) :]
        offsets.append(start + len(body))
        return out, offsets

    def rule_ref(self, token: Tok) -> RuleRef:
        span = (token.start_pos, token.end_pos)
        if token.value in _RESERVED_WORDS:
            self._report(span, f"{token.value!r} is a boolean in XGrammar's EBNF, not a rule name")
        return RuleRef(token.value, span)

    def token_ref(self, token: Tok) -> Literal:
        return self._refuse("<token>", self._span(token))

    def macro_call(self, name: Tok, args: list[Tok | Nested], rpar: Tok) -> Expr:
        span = (name.start_pos, rpar.end_pos)
        if name.value == "Regex":
            return self._regex(span, args)
        # Rule names among the arguments still count as references, so that an undefined
        # one is reported and the rules a TagDispatch dispatches to are not called unreachable.
        flat = [token for arg in args for token in (arg.tokens() if isinstance(arg, Nested) else [arg])] + [rpar]
        for token, following in zip(flat, flat[1:]):
            is_key = following.type == "EQUAL"  # loop_after_dispatch=..., excludes=...
            if token.type == "NAME" and not is_key and token.value not in _RESERVED_WORDS:
                self._macro_refs.append(RuleRef(token.value, self._span(token)))
        return self._refuse(f"{name.value}(...)", span)

    def _regex(self, span: Span, parts: list[Tok | Nested]) -> Expr:
        """``Regex("pattern", json_string=true|false)``: checked as XGrammar's parser does, then
        lowered exactly by :mod:`.regex`; a regex problem points at its character in the text."""
        arguments: list[list[Tok | Nested]] = [[]]
        for part in parts:
            if isinstance(part, Tok) and part.type == "COMMA":
                arguments.append([])
            else:
                arguments[-1].append(part)
        positional: list[Tok | Nested] = []
        json_string = False
        for argument in arguments if parts else []:
            if len(argument) == 3 and isinstance(argument[0], Tok) and _token_type(argument[1]) == "EQUAL":
                key, value = argument[0].value, argument[2]
                if key != "json_string":
                    self._report(span, f"Regex does not support the named argument {key}")
                elif not (isinstance(value, Tok) and value.value in _RESERVED_WORDS):
                    self._report(span, "json_string must be a boolean (true or false)")
                else:
                    json_string = value.value == "true"
            elif len(argument) == 1:
                positional.append(argument[0])
            else:
                self._report(span, "Regex arguments are one string and json_string=true|false, separated by commas")
                return Literal("", span)
        if len(positional) != 1:
            self._report(span, "Regex expects exactly one string argument")
            return Literal("", span)
        pattern = positional[0]
        if not (isinstance(pattern, Tok) and pattern.type == "STRING"):
            self._report(span, "Regex pattern must be a string literal")
            return Literal("", span)
        start = pattern.start_pos + 1
        code_points, offsets = self._decode_located(pattern.value[1:-1], start, _STRING_ESCAPES)
        warnings: list[RegexWarning] = []

        def located(start: int, end: int) -> Span:
            at = offsets[start] if start < len(offsets) else offsets[-1]
            stop = offsets[end] if end < len(offsets) else offsets[-1]
            return (at, max(stop, at + 1))

        try:
            expr = regex_to_expr("".join(map(chr, code_points)), json_string=json_string, warnings=warnings, span=span)
        except RegexError as error:
            message = error.message if error.refused else f"XGrammar rejects this regex: {error.message}"
            self._report(located(error.start, error.end), message)
            return Literal("", span)
        for warning in warnings:
            self._report(located(warning.start, warning.end), warning.message, "warning")
        return _with_span(expr, span)

    def group(self, lpar: Tok, inner: Expr | None, rpar: Tok) -> Expr:
        """The inner expression, its span widened to the parentheses; ``()`` is ε."""
        span = (lpar.start_pos, rpar.end_pos)
        if inner is None:  # "()": XGrammar's other spelling of ""
            return Literal("", span)
        return replace(inner, span=span)

    # ---- composites --------------------------------------------------------------------

    def quantifier(self, tokens: list[Tok]) -> _Quantifier:
        end = tokens[-1].end_pos
        kind = tokens[0].type
        if kind != "LBRACE":
            return _Quantifier(*_SIMPLE_QUANTIFIERS[kind], end)
        low = self._bound(tokens[1])
        if len(tokens) == 3:  # {m}
            return _Quantifier(low, low, end)
        if len(tokens) == 4 or tokens[3].value == "-1":  # {m,} or {m,-1}
            return _Quantifier(low, None, end)
        upper = tokens[3]
        if upper.type == "NAME":
            self._report(self._span(upper), f"expected an upper bound or -1, got {upper.value!r}")
            return _Quantifier(low, None, end)
        high = self._bound(upper)
        if low > high:
            message = f"invalid repetition bounds {{{low},{high}}}: {low} is larger than {high}"
            self._report(self._span(upper), message)
            high = low
        return _Quantifier(low, high, end)

    def _bound(self, token: Tok) -> int:
        value = int(token.value)
        if value > MAX_REPEAT_BOUND:
            message = f"repetition bound {value} is too large: XGrammar wraps bounds above 2**31-1"
            self._report(self._span(token), message)
            return MAX_REPEAT_BOUND
        return value

    def item(self, atom: Expr, quantifier: _Quantifier | None) -> Expr:
        if quantifier is None:
            return atom
        return Repeat(atom, quantifier.min, quantifier.max, (atom.span[0], quantifier.end))  # type: ignore[index]

    def sequence(self, items: list[Expr]) -> Expr:
        if len(items) == 1:
            return items[0]
        return Sequence(tuple(items), (items[0].span[0], items[-1].span[1]))  # type: ignore[index]

    def choices(self, options: list[Expr]) -> Expr:
        if len(options) == 1:
            return options[0]
        return Choice(tuple(options), (options[0].span[0], options[-1].span[1]))  # type: ignore[index]

    def lookahead(self, opener: Tok, body: Expr, closer: Tok) -> _Lookahead:
        span = (opener.start_pos, closer.end_pos)
        # XGrammar's parser accepts these but its grammar checks reject them afterwards.
        if isinstance(body, Choice):
            self._report(span, "XGrammar does not support choices in a lookahead assertion")
        elif isinstance(body, Literal) and not body.text:
            self._report(span, "XGrammar does not allow an empty lookahead assertion")
        self._report(span, LOOKAHEAD_DROPPED, "warning")
        return _Lookahead(body, span)

    def rule(self, name: Tok, attributes: Tok | None, body: Expr, lookahead: _Lookahead | None) -> None:
        name_span = (name.start_pos, name.end_pos)
        line_start = self.text.rfind("\n", 0, name_span[0]) + 1
        if self.text[line_start : name_span[0]].strip():
            self._report(name_span, f"rule {name.value!r} must start on a new line")
        # A rule may be named like a macro (XGrammar allows it) but never referenced: a
        # reference would read as a macro call.
        if name.value in _RESERVED_WORDS:
            self._report(name_span, f"{name.value!r} is reserved in XGrammar's EBNF")
        if attributes is not None:
            self._attributes(attributes)
        end = lookahead.span[1] if lookahead else body.span[1]  # type: ignore[index]
        rule = Rule(name.value, body, (name_span[0], end))
        macro_refs, self._macro_refs = tuple(self._macro_refs), []
        hidden = lookahead.body if lookahead else None
        self.definitions.append(_Definition(rule, name_span, hidden, macro_refs))

    def _attributes(self, token: Tok) -> None:
        """Refuse ``max_tokens=N``; drop ``capture`` with a warning (the language is unchanged)."""
        span = self._span(token)
        body, position = token.value[1:-1], 0
        while position < len(body) or position == 0:
            match = _ATTRIBUTE_RE.match(body, position)
            if match is None or match.end() == position:
                message = f"unknown rule attributes {token.value}"
                self._report(span, f"{message}: XGrammar knows max_tokens and capture")
                return
            if match.group("max_tokens"):
                self._refuse("max_tokens", span)
            else:
                self._report(span, CAPTURE_DROPPED, "warning")
            position = match.end()


_SIMPLE_QUANTIFIERS = {"STAR": (0, None), "PLUS": (1, None), "QMARK": (0, 1)}


def _token_type(value: object) -> str | None:
    return value.type if isinstance(value, Tok) else None


def _with_span(expr: Expr, span: Span) -> Expr:
    """``expr`` and every node inside it located at ``span`` (the whole ``Regex(...)`` call)."""
    if isinstance(expr, Sequence):
        return Sequence(tuple(_with_span(e, span) for e in expr.items), span)
    if isinstance(expr, Choice):
        return Choice(tuple(_with_span(e, span) for e in expr.options), span)
    if isinstance(expr, Repeat):
        return Repeat(_with_span(expr.item, span), expr.min, expr.max, span)
    return replace(expr, span=span)


def _bad_escape_message(piece: str, escapes: dict[str, str]) -> str:
    letter = piece[1]
    if letter == "x":
        return "bad escape \\x: expected at least one hex digit"
    if letter in "uU":
        return f"bad escape \\{letter}: expected {4 if letter == 'u' else 8} hex digits"
    if letter in _CLASS_SHORTHANDS and escapes is _CLASS_ESCAPES:
        return f"bad escape {piece}: XGrammar's EBNF has no class shorthands; spell the ranges out"
    where = "character class" if escapes is _CLASS_ESCAPES else "string"
    return f"bad escape {piece} in a {where}"


def _check_rules(
    text: str,
    root: str,
    definitions: list[_Definition],
    broken_names: set[str],
    diagnostics: list[Diagnostic],
) -> dict[str, Rule]:
    """Duplicates, undefined references, the root rule and reachability, over the whole grammar."""
    rules: dict[str, Rule] = {}
    first_span: dict[str, Span] = {}
    body_refs: dict[str, tuple[RuleRef, ...]] = {}  # of each name's first definition
    for definition in definitions:
        name = definition.rule.name
        if name in rules:
            line, _ = position_of(text, first_span[name][0])
            message = f"rule {name!r} is defined twice (first on line {line})"
            diagnostics.append(_diagnostic(text, definition.name_span, message))
            continue
        rules[name] = definition.rule
        first_span[name] = definition.name_span
    known = rules.keys() | broken_names
    for definition in definitions:
        refs = _references(definition.rule.body)
        if rules[definition.rule.name] is definition.rule:
            body_refs[definition.rule.name] = refs
        for ref in refs + _references(definition.lookahead) + definition.macro_refs:
            if ref.name not in known and ref.name not in _RESERVED_WORDS:
                assert ref.span is not None
                message = f"undefined rule {ref.name!r}" + _did_you_mean(ref.name, known)
                diagnostics.append(_diagnostic(text, ref.span, message))
    if root not in known:
        diagnostics.append(_diagnostic(text, (0, 0), f"the grammar has no root rule {root!r}"))
    elif not broken_names:  # with unparsed rules we cannot know who references whom
        _warn_unreachable(text, root, definitions, body_refs, first_span, diagnostics)
    return rules


def _did_you_mean(name: str, known) -> str:
    """``; did you mean 'expr'?`` for the closest defined name (difflib), else nothing."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


LEFT_RECURSION_NOTE = (
    "left recursion in {rules}: XGrammar takes it, and cfgzip's GNF conversion rewrites it "
    "(no action needed; the classes are for the same language)"
)


def _note_left_recursion(text: str, rules: dict[str, Rule], diagnostics: list[Diagnostic]) -> None:
    """One ``info`` diagnostic per group of mutually left-recursive rules (``expr ::= expr "+" term``; unit
    cycles ``x ::= y``, ``y ::= x`` count too), at the group's first rule in the text.

    A rule is left-recursive when it can derive itself as the leftmost symbol, looking
    through nullable prefixes: NULLABLE is a fixpoint over the rules, LEFT(A) the rules
    that can start A's body; a group is a strongly connected part of the LEFT graph.
    """
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, rule in rules.items():
            if name not in nullable and _nullable(rule.body, nullable):
                nullable.add(name)
                changed = True
    left = {name: _leftmost(rule.body, nullable) & rules.keys() for name, rule in rules.items()}
    reach: dict[str, set[str]] = {}
    for name in rules:
        seen, todo = set(), list(left[name])
        while todo:
            other = todo.pop()
            if other not in seen:
                seen.add(other)
                todo += left[other]
        reach[name] = seen
    done: set[str] = set()
    for name, rule in rules.items():  # source order
        if name in done or name not in reach[name]:
            continue
        group = [other for other in rules if other in reach[name] and name in reach[other]]
        done.update(group)
        listed = ", ".join(repr(g) for g in group)
        message = LEFT_RECURSION_NOTE.format(rules=("rule " if len(group) == 1 else "rules ") + listed)
        start = rule.span[0] if rule.span else 0
        diagnostics.append(_diagnostic(text, (start, start + len(name)), message, "info"))


def _nullable(expr: Expr, nullable: set[str]) -> bool:
    if isinstance(expr, Literal):
        return not expr.text
    if isinstance(expr, CharClass):
        return False
    if isinstance(expr, RuleRef):
        return expr.name in nullable
    if isinstance(expr, Sequence):
        return all(_nullable(item, nullable) for item in expr.items)
    if isinstance(expr, Choice):
        return any(_nullable(option, nullable) for option in expr.options)
    if isinstance(expr, Automaton):
        return expr.nullable()
    assert isinstance(expr, Repeat)
    return expr.min == 0 or _nullable(expr.item, nullable)


def _leftmost(expr: Expr, nullable: set[str]) -> set[str]:
    """Rules that can be the first symbol of ``expr`` (past nullable items)."""
    if isinstance(expr, RuleRef):
        return {expr.name}
    if isinstance(expr, Sequence):
        out: set[str] = set()
        for item in expr.items:
            out |= _leftmost(item, nullable)
            if not _nullable(item, nullable):
                break
        return out
    if isinstance(expr, Choice):
        return set().union(*(_leftmost(option, nullable) for option in expr.options))
    if isinstance(expr, Repeat):
        return _leftmost(expr.item, nullable) if expr.max != 0 else set()
    return set()


def _warn_unreachable(
    text: str,
    root: str,
    definitions: list[_Definition],
    body_refs: dict[str, tuple[RuleRef, ...]],
    name_spans: dict[str, Span],
    diagnostics: list[Diagnostic],
) -> None:
    """Warn at each rule the root cannot reach; say so when a dropped or refused construct did."""
    hidden = {d.rule.name: d.macro_refs + _references(d.lookahead) for d in definitions}
    in_language = _reachable(root, body_refs, {})
    with_hidden = _reachable(root, body_refs, hidden)
    for name in body_refs.keys() - in_language:
        note = " (only dropped or refused constructs use it)" if name in with_hidden else ""
        message = f"rule {name!r} is unreachable from {root!r}{note}"
        diagnostics.append(_diagnostic(text, name_spans[name], message, "warning"))


def _reachable(
    root: str, body_refs: dict[str, tuple[RuleRef, ...]], hidden: dict[str, tuple[RuleRef, ...]]
) -> set[str]:
    """Names reachable from ``root`` through bodies (``body_refs``: the references in each
    rule's body) and, per rule, its ``hidden`` references."""
    seen, todo = {root}, [root]
    while todo:
        name = todo.pop()
        refs = body_refs.get(name)
        if refs is None:
            continue
        for ref in refs + hidden.get(name, ()):
            if ref.name not in seen:
                seen.add(ref.name)
                todo.append(ref.name)
    return seen


def _references(*exprs: Expr | None) -> tuple[RuleRef, ...]:
    """Every RuleRef in the given expressions, in source order."""
    out: list[RuleRef] = []
    todo = [e for e in reversed(exprs) if e is not None]
    while todo:
        expr = todo.pop()
        if isinstance(expr, RuleRef):
            out.append(expr)
        elif isinstance(expr, Sequence):
            todo += reversed(expr.items)
        elif isinstance(expr, Choice):
            todo += reversed(expr.options)
        elif isinstance(expr, Repeat):
            todo.append(expr.item)
    return tuple(out)
