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
- Rule attributes ``name[lazy, max_chars=N, max_tokens=N, temperature=T, capture="c", ...]``
  (:mod:`.rule_attributes` reads the block as XGrammar's lexer does).
- Macros ``TagDispatch(...)``, ``TokenTagDispatch(...)``, ``Token(...)``,
  ``ExcludeToken(...)``, ``Regex(...)``, ``Substring(...)``: a macro name is always a call,
  never a rule reference; the arguments are XGrammar's (:mod:`.macro_args`), and a lookahead
  may not be a bare ``TagDispatch``, ``Regex`` or ``Substring``. ``true``/``false`` are reserved.

Exactly reproduced: ``Regex("...", json_string=..., flags=...)`` (:mod:`.regex`; a regex
XGrammar rejects is an error at its character), ``TagDispatch`` (:mod:`.tag_dispatch`),
``Substring`` (:mod:`.substring`), ``lazy`` / ``max_chars`` on a rule whose language is
regular (:mod:`.regular`, refused with the reason otherwise), and the token macros ``Token``,
``ExcludeToken``, ``TokenTagDispatch``, which name vocabulary ids (:mod:`.token_macros`).
Refused (error, see ``_REFUSED_BECAUSE``): ``<...>`` token references, ``max_tokens`` and the
rule-id capture attributes. Dropped or kept with a warning: rule-level lookaheads ``(= ...)``,
captures and ``temperature``, which only restrict the language, leave it alone, or only
concern sampling. Code points above U+10FFFF and
repetition bounds above 2**31-1 are errors: XGrammar accepts them but silently
produces a different grammar (an invalid code point, a wrapped 32-bit bound).
Surrogate code points (``"\\uD800"``) are kept: XGrammar matches their 3-byte
encoding and the lowering encodes them with ``surrogatepass``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

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
from .macro_args import MacroArgumentError, MacroArguments, MacroValue, read_arguments
from .regex import RegexError, RegexWarning, regex_to_expr
from .regular import NotRegular, follows_itself, shape_rule
from .rule_attributes import AttributeError_, RuleAttributes, read_attributes
from .substring import substring_automaton
from .tag_dispatch import tag_dispatch_automaton
from .token_macros import TOKEN_REGION_REFUSAL, stop_tokens_as_terminals, token_set, token_tag_dispatch
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
    TokenSet,
)

if TYPE_CHECKING:
    from ..deadline import Deadline

__all__ = [
    "parse_ebnf",
    "check_ebnf",
    "decode_ebnf_string",
    "XGRAMMAR_MACROS",
    "MAX_REPEAT_BOUND",
    "REFUSAL",
    "LOOKAHEAD_DROPPED",
    "CAPTURE_DROPPED",
    "TEMPERATURE_KEPT",
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


REFUSAL = "cfgzip cannot reproduce the language of {what} exactly; ignoring it would make token classes unsound"
# Why each refused construct is out of reach, appended to REFUSAL.
_REFUSED_BECAUSE = {
    "TagDispatch": "it scans free text for tags with an automaton XGrammar builds itself",
    "<token>": "it matches a token id, not bytes (and XGrammar's EBNF has no token references)",
    "max_tokens": "it bounds the number of tokens, which depends on the tokenizer, not on bytes",
    "capture_hidden_body_rule_id": "it names helper rules by XGrammar's internal rule ids (structural-tag internals)",
    "ExcludeToken": TOKEN_REGION_REFUSAL,
    "TokenTagDispatch": TOKEN_REGION_REFUSAL,
}
LOOKAHEAD_DROPPED = (
    "lookahead assertion dropped: it only restricts the language; the lossless verifier checks the classes"
)
CAPTURE_DROPPED = "capture attribute dropped: it names a match and leaves the language unchanged"
TEMPERATURE_KEPT = (
    "temperature attribute: it sets the sampling temperature inside the rule and leaves the masks unchanged, "
    "so cfgzip's masks are XGrammar's; apply it when sampling"
)

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
    shaping: _Shaping | None = None  # lazy / max_chars

    @property
    def name(self) -> str:
        return self.rule.name

    @property
    def body_refs(self) -> tuple[RuleRef, ...]:
        """The rule references in the body (for their names: see :class:`_MovedDefinition`)."""
        return _body_references(self.rule.body)

    @property
    def hidden_refs(self) -> tuple[RuleRef, ...]:
        """The references the language does not use: in the lookahead and refused macros."""
        return self.macro_refs + _body_references(self.lookahead)


@dataclass(frozen=True, slots=True)
class _Shaping:
    """The attributes that change a rule's language: ``lazy`` and ``max_chars``, at ``span``."""

    lazy: bool
    max_chars: int | None
    span: Span


def parse_ebnf(
    text: str,
    *,
    root: str = "root",
    source: str = "<grammar>",
    reachable_only: bool = False,
    warn_unreachable: bool = True,
    deadline: Deadline | None = None,
) -> GrammarAST:
    """Parse an XGrammar EBNF grammar into a :class:`GrammarAST`.

    Parameters
    ----------
    text : str
        The grammar, in the dialect ``xgrammar.Grammar.from_ebnf`` accepts.
    root : str, keyword-only
        The start rule; it may also be referenced inside bodies.
    source : str, keyword-only
        A file name for rendered diagnostics.
    reachable_only : bool, keyword-only
        Keep only the rules the root reaches through rule bodies (lookaheads are dropped, so
        they do not count). The checks over the whole text still run first (duplicates,
        undefined names, unreachable rules); shaping and the left-recursion notes then see
        the kept rules alone. The language is the same. For XGrammar's JSON Schema EBNF,
        whose ~20 ``basic_*`` helpers are mostly unused by a small schema: their notes are
        not shown there anyway (:meth:`~.sources.GrammarSource.user_diagnostics`), and the
        lowering and normal form need not pay for them.
    warn_unreachable : bool, keyword-only
        ``False``: the warnings at rules the root cannot reach are not made, only counted in the
        result's ``hidden_warnings``, unless the grammar has an error (a ``GrammarError`` holds them
        as always). For XGrammar's EBNF, where no such warning is shown (a JSON Schema's 19 unused
        ``basic_*`` helpers: :meth:`~.sources.GrammarSource.user_diagnostics` counts them in a note).
    deadline : Deadline or None, keyword-only
        The build's time budget (:class:`~cfgzip_lab.deadline.Deadline`), checked per rule and while a
        ``Regex(...)`` is built (:func:`~.regex.regex_to_expr`).

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
    BuildBudgetError
        Past ``deadline``.

    Examples
    --------
    >>> parse_ebnf('root ::= "a" [0-9]*').rules["root"].body.items[1].min
    0
    """
    ast, diagnostics = _analyse(text, root, reachable_only, warn_unreachable, deadline)
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


def _analyse(
    text: str, root: str, reachable_only: bool = False, warn_unreachable: bool = True, deadline: Deadline | None = None
) -> tuple[GrammarAST, list[Diagnostic]]:
    """Parse chunk by chunk, then run the whole-grammar checks."""
    diagnostics, definitions, broken_names = _parse_chunks(text, deadline)
    rules, hidden = _whole_grammar(text, root, definitions, broken_names, diagnostics, reachable_only, warn_unreachable)
    return GrammarAST(rules=rules, root=root, text=text, hidden_warnings=hidden), diagnostics


def _parse_chunks(text: str, deadline: Deadline | None = None) -> tuple[list[Diagnostic], list[_Definition], set[str]]:
    """Each rule chunk parsed: the diagnostics, the rules defined, and the names defined in
    chunks that did not parse."""
    diagnostics: list[Diagnostic] = []
    definitions: list[_Definition] = []
    broken_names: set[str] = set()
    pieces = _kept_prefix(text)
    for _, _, _, chunk in pieces:
        diagnostics += chunk.diagnostics
        definitions += chunk.definitions
        broken_names.update(chunk.broken_names)
    for start, end in _rule_chunks(text, pieces[-1][1] if pieces else 0):
        if deadline is not None:
            deadline.check("the front end (parsing)")
        piece = text[start:end] if end - start <= _CHUNK_CACHED_CHARS else None
        chunk = _parsed_chunk(text, start, end, piece, deadline)
        pieces.append((start, end, piece, chunk))
        diagnostics += chunk.diagnostics
        definitions += chunk.definitions
        broken_names.update(chunk.broken_names)
    _PARSED.insert(0, (len(text), pieces))
    del _PARSED[_PARSED_KEPT:]
    return diagnostics, definitions, broken_names


_PARSED: list[tuple[int, list[tuple[int, int, str | None, _Chunk]]]] = []
_PARSED_KEPT = 4
"""The last texts parsed, newest first: each one's length and its chunks as ``(start, end, chunk text,
parse)`` (no text for a chunk past _CHUNK_CACHED_CHARS). A text that starts with the same chunks as one
of them takes those parses at once (:func:`_kept_prefix`): the same objects the chunk cache would give,
without a cache look-up and a line count per chunk (XGrammar prints 13 identical ``basic_*`` rules at
the top of every JSON Schema's EBNF)."""


def _kept_prefix(text: str) -> list[tuple[int, int, str | None, _Chunk]]:
    """The run of first chunks of the newest parsed text that ``text`` starts with (chunk for chunk,
    and cut at the same places: ``text`` has a rule head right after the run), where one has any. A chunk that was
    the last of its text, or would be the last of ``text``, is never taken (the end-of-input message
    says which); neither is one too long for the chunk cache, nor anything after it."""
    n = len(text)
    for length, pieces in _PARSED:
        k = 0
        for start, end, piece, _ in pieces:
            if piece is None or end >= n or end == length or not text.startswith(piece, start):
                break
            k += 1
        # Past the run the cut must be a rule head in ``text`` too; a chunk after the first starts
        # with its own head, so the run less its last chunk always ends at one.
        if k and _RULE_HEAD.match(text, pieces[k - 1][1]) is None:
            k -= 1
        if k:
            return pieces[:k]
    return []


class _Chunk(NamedTuple):
    """What one rule chunk parses to: its diagnostics and rules (positions in the whole text) and,
    when it did not parse, the names it defines."""

    diagnostics: list[Diagnostic]
    definitions: list[_Definition]
    broken_names: tuple[str, ...]


_CHUNKS: dict[tuple[str, bool], list[tuple[int, int, _Chunk]]] = {}
_CHUNKS_KEPT = 2048
_CHUNK_CACHED_CHARS = 4096
"""Parsed chunks are kept by their text (up to this many characters; the last 2,048 chunks):
XGrammar prints the same ~20 ``basic_*`` rules into every JSON Schema's EBNF, and an editor
re-checks a grammar whose other rules did not change. A chunk starts a line and its parse reads
nothing outside it, so the same text parses to the same result moved by the offset and lines
between the two places (measured: a JSON-Schema-Test-Suite schema's parse 1.6 ms -> 0.3 ms)."""
_CHUNK_PLACES = 4  # (offset, line) places a chunk text is kept at, each with its own parse


def _parsed_chunk(
    text: str, start: int, end: int, piece: str | None = None, deadline: Deadline | None = None
) -> _Chunk:
    """:func:`parse_chunk` of ``text[start:end]`` (``piece``, where the caller has cut it), or the kept
    parse of the same chunk text."""
    last = end == len(text)  # the end-of-input message names the grammar's end or the next rule
    if piece is None and end - start <= _CHUNK_CACHED_CHARS:
        piece = text[start:end]
    key = (piece, last) if piece is not None else None
    kept = _CHUNKS.get(key) if key is not None else None
    if kept is not None:
        here = position_of(text, start)[0]
        for at, line, chunk in kept:
            if (at, line) == (start, here):
                return chunk
        at, line, chunk = kept[0]
        chunk = _moved(chunk, start - at, here - line)
        if len(kept) < _CHUNK_PLACES:
            # Kept at this place too: the next grammar with this chunk here gets the same objects (the
            # lowering reuses its work on a prefix of such rules, .lower._Prefix).
            kept.append((start, here, chunk))
        return chunk
    builder = _Builder(text, deadline)
    try:
        parse_chunk(tokens(text, start, end), builder)
    except ParseFailure as error:  # the chunk's own diagnostics and rules go, as lark's did
        names = tuple(m.group(1) for m in _RULE_HEAD.finditer(text, start, end))
        chunk = _Chunk([_syntax_diagnostic(text, end, error, start)], [], names)
    else:
        chunk = _Chunk(builder.diagnostics, builder.definitions, ())
    if key is not None:
        if len(_CHUNKS) >= _CHUNKS_KEPT:
            _CHUNKS.clear()  # derived data only: dropped whole
        _CHUNKS[key] = [(start, position_of(text, start)[0], chunk)]
    return chunk


def _moved(chunk: _Chunk, offset: int, lines: int) -> _Chunk:
    """``chunk`` parsed ``offset`` characters and ``lines`` lines further down (columns stay: a chunk
    starts a line). Its diagnostics move at once; its rules when something reads their nodes
    (:class:`_MovedDefinition`): a JSON Schema's EBNF past its root rule holds basic_* rules at new
    places, mostly unreachable, that were moved to be dropped (0.14 ms of a 1.6 ms compile)."""
    mover = _Mover(offset)
    definitions = [_MovedDefinition(d, mover) for d in chunk.definitions]
    diagnostics = [replace(d, line=d.line + lines, span=mover.span(d.span)) for d in chunk.diagnostics]
    return _Chunk(diagnostics, definitions, chunk.broken_names)  # type: ignore[arg-type]


class _Mover:
    """Nodes of one chunk moved ``offset`` characters down, each once: nodes shared inside the chunk
    stay shared (the lowering lowers an automaton met twice once, by identity)."""

    __slots__ = ("offset", "memo")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.memo: dict[int, object] = {}

    def span(self, s: Span | None) -> Span | None:
        return None if s is None else (s[0] + self.offset, s[1] + self.offset)

    def expr(self, e):
        memo, span = self.memo, self.span
        got = memo.get(id(e))
        if got is not None:
            return got
        cls = e.__class__
        if cls is Literal:  # (the leaves made directly: dataclasses.replace was most of a move)
            got = Literal(e.text, span(e.span))
        elif cls is CharClass:
            got = CharClass(e.ranges, e.negated, span(e.span))
        elif cls is RuleRef:
            got = RuleRef(e.name, span(e.span))
        elif isinstance(e, Sequence):
            got = Sequence(tuple(self.expr(i) for i in e.items), span(e.span))
        elif isinstance(e, Choice):
            got = Choice(tuple(self.expr(o) for o in e.options), span(e.span))
        elif isinstance(e, Repeat):
            got = Repeat(self.expr(e.item), e.min, e.max, span(e.span))
        elif isinstance(e, Automaton):
            edges = tuple((q, label if isinstance(label, tuple) else self.expr(label), r) for q, label, r in e.edges)
            got = replace(e, edges=edges, span=span(e.span))
        else:  # TokenSet
            got = replace(e, span=span(e.span))
        memo[id(e)] = got
        return got


class _MovedDefinition:
    """A :class:`_Definition` parsed elsewhere, moved (by its chunk's :class:`_Mover`) when read: the
    name and the references' names are the parse's own, what holds a place is moved on first use and
    kept (the same objects every time, as the lowering's prefix reuse needs)."""

    __slots__ = ("_of", "_mover", "_rule", "_lookahead", "_macro_refs", "_shaping")

    def __init__(self, of: _Definition, mover: _Mover) -> None:
        self._of = of
        self._mover = mover
        self._rule = self._lookahead = self._macro_refs = self._shaping = None

    @property
    def name(self) -> str:
        return self._of.rule.name

    @property
    def name_span(self) -> Span:
        return self._mover.span(self._of.name_span)  # type: ignore[return-value]

    @property
    def rule(self) -> Rule:
        if self._rule is None:
            of, mover = self._of.rule, self._mover
            self._rule = Rule(of.name, mover.expr(of.body), mover.span(of.span))
        return self._rule

    @property
    def lookahead(self) -> Expr | None:
        of = self._of.lookahead
        if of is not None and self._lookahead is None:
            self._lookahead = self._mover.expr(of)
        return self._lookahead

    @property
    def macro_refs(self) -> tuple[RuleRef, ...]:
        if self._macro_refs is None:
            self._macro_refs = tuple(self._mover.expr(r) for r in self._of.macro_refs)
        return self._macro_refs

    @property
    def shaping(self) -> _Shaping | None:
        of = self._of.shaping
        if of is not None and self._shaping is None:
            self._shaping = replace(of, span=self._mover.span(of.span))
        return self._shaping

    @property
    def body_refs(self) -> tuple[RuleRef, ...]:
        """The parse's references (their names; their spans are the parse's place)."""
        return _body_references(self._of.rule.body)

    @property
    def hidden_refs(self) -> tuple[RuleRef, ...]:
        return self._of.hidden_refs


def _whole_grammar(
    text: str,
    root: str,
    definitions: list[_Definition],
    broken_names: set[str],
    diagnostics: list[Diagnostic],
    reachable_only: bool = False,
    warn_unreachable: bool = True,
) -> tuple[dict[str, Rule], int]:
    """The checks over all rules (names, reachability, the lazy and max_chars rules, left
    recursion); their diagnostics join ``diagnostics``, which end sorted by position.
    ``reachable_only``: past the name checks, the rules the root reaches alone (see parse_ebnf).
    ``warn_unreachable=False``: the unreachable-rule warnings are made only where an error comes,
    in the place they would have had; else they are counted, and the count is returned too."""
    first, reached, unwarned = _check_rules(text, root, definitions, broken_names, diagnostics, warn_unreachable)
    if reachable_only and reached is not None and not any(d.severity == "error" for d in diagnostics):
        rules = {name: d.rule for name, d in first.items() if name in reached}
    else:
        rules = {name: d.rule for name, d in first.items()}
    if not any(d.severity == "error" for d in diagnostics):
        _shape_rules(text, rules, definitions, diagnostics)
    if not any(d.severity == "error" for d in diagnostics):
        _note_left_recursion(text, rules, diagnostics)
    hidden = 0
    if unwarned is not None:
        at, names, warn = unwarned
        if any(d.severity == "error" for d in diagnostics):
            diagnostics[at:at] = warn()  # where _check_rules would have put them
        else:
            hidden = len(names)
    diagnostics.sort(key=lambda d: (d.line, d.column))
    return rules, hidden


def _shape_rules(
    text: str, rules: dict[str, Rule], definitions: list[_Definition], diagnostics: list[Diagnostic]
) -> None:
    """Rules with ``lazy`` or ``max_chars`` get their exact language as one automaton
    (:mod:`.regular`), or a refusal saying why not. A shaped rule inside another keeps its
    meaning: rules are shaped in the order they use each other."""
    wanted = {d.name: d.shaping for d in definitions if d.shaping and rules.get(d.name) is d.rule}
    if not wanted:
        return
    shaped: dict[str, Automaton] = {}
    nullable = _nullable_rules(rules)

    def shape(name: str, inside: tuple[str, ...]) -> None:
        if name in shaped:
            return
        for ref in _body_references(rules[name].body):  # shaped rules it uses, first
            if ref.name in wanted and ref.name not in inside and ref.name != name:
                shape(ref.name, inside + (name,))
        shaping = wanted[name]
        try:
            if shaping.max_chars is not None and follows_itself(rules, name, nullable):
                raise NotRegular(
                    f"rule {name!r} can start where it ends, which XGrammar 0.2.8 counts wrongly "
                    "(the second occurrence gets more characters)"
                )
            shaped[name] = shape_rule(
                rules, name, lazy=shaping.lazy, max_chars=shaping.max_chars, shaped=shaped, span=rules[name].span
            )
        except NotRegular as error:
            what = " and ".join(
                (["lazy"] if shaping.lazy else []) + (["max_chars"] if shaping.max_chars is not None else [])
            )
            message = f"{REFUSAL.format(what=f'{what} on rule {name!r}')}: cfgzip reproduces it for a rule whose language is regular, and {error.reason}"
            diagnostics.append(_diagnostic(text, shaping.span, message))

    for name in wanted:
        shape(name, ())
    for name, automaton in shaped.items():
        rules[name] = replace(rules[name], body=automaton)


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


def _rule_chunks(text: str, at: int = 0) -> list[tuple[int, int]]:
    """``(start, end)`` offsets: the text before the first rule head, then one per head; from ``at``
    (0, or where a rule head starts) on."""
    cuts = [at] + [m.start() for m in _RULE_HEAD.finditer(text, at) if m.start() > at] + [len(text)]
    return list(zip(cuts, cuts[1:]))


_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)
# A class's text → its (ranges, negated), for classes read without a diagnostic: the reading depends on
# the text alone, and an EBNF repeats its classes (XGrammar's whitespace class, dozens of times a schema).
_CLASSES_READ: dict[str, tuple[tuple[tuple[int, int], ...], bool]] = {}


def _simple_unescaped(body: str, escapes: dict[str, str]) -> str | None:
    """The text of a string body whose escapes are all one-letter ones in ``escapes`` (read left to right,
    as _CHAR_RE reads them), or None (a \\x, \\u, \\U or bad escape: the full decoding reports it)."""
    out = []
    at = 0
    for match in _ESCAPE_RE.finditer(body):
        got = escapes.get(match.group(1))
        if got is None:
            return None
        out.append(body[at : match.start()])
        out.append(got)
        at = match.end()
    out.append(body[at:])
    return "".join(out)


def _diagnostic(text: str, span: Span, message: str, severity: Severity = "error") -> Diagnostic:
    line, column = position_of(text, span[0])
    return Diagnostic(line, column, message, severity, span)


def _syntax_diagnostic(text: str, end: int, error: ParseFailure, start: int | None = None) -> Diagnostic:
    """Say what the parser found and what it expected, at the offending position in ``text``
    (``end``: where the chunk ends, ``start``: where it begins).

    A rule that ends while a ``(`` is open is reported at that ``(`` ("this '(' is never
    closed"), not where the rule ran out: the author's mistake is the parenthesis, and the end
    of a rule can be lines away from it (issue 35.3). XGrammar says "Expect )" at the end."""
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
    message = f"unexpected {found}; expected {expected}"
    if token.type == "$END" and "RPAR" in error.expected and start is not None:
        opened = open_parentheses(text, start, token.start_pos)
        if opened:
            return _diagnostic(text, (opened[-1], opened[-1] + 1), f"this '(' is never closed: {message}")
    return _diagnostic(text, span, message)


def open_parentheses(text: str, start: int, end: int) -> list[int]:
    """Offsets of the ``(`` (of a group, a lookahead ``(=`` or a macro call) still open at ``end``,
    reading ``text[start:end]`` as the parser's lexer does (strings, classes and comments skipped),
    outermost first."""
    opened: list[int] = []
    for token in tokens(text, start, end):
        if token.type in ("LPAR", "LOOKAHEAD"):
            opened.append(token.start_pos)
        elif token.type == "RPAR" and opened:
            opened.pop()
    return opened


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

    def __init__(self, text: str, deadline: Deadline | None = None) -> None:
        self.text = text
        self.deadline = deadline  # the build's, for the automaton of a Regex(...)
        self.diagnostics: list[Diagnostic] = []
        self.definitions: list[_Definition] = []
        self._macro_refs: list[RuleRef] = []  # of the rule being built
        # id → (node, macro name) of what a macro call built (kept alive, so ids stay unique):
        # XGrammar refuses a lookahead that is a bare macro call.
        self._macro_results: dict[int, tuple[Expr, str]] = {}

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
        simple = _simple_unescaped(body, _STRING_ESCAPES)
        if simple is not None:  # only one-letter escapes (JSON Schemas' "\"name\""): nothing to report
            return Literal(simple, span)
        code_points = self._decode(body, span[0] + 1, _STRING_ESCAPES)
        return Literal("".join(map(chr, code_points)), span)

    def char_class(self, token: Tok) -> CharClass:
        span = (token.start_pos, token.end_pos)
        read = _CLASSES_READ.get(token.value)
        if read is not None:  # a class written the same way before, read without a diagnostic
            return CharClass(read[0], read[1], span)
        reported = len(self.diagnostics)
        got = self._read_class(token, span)
        if len(self.diagnostics) == reported:
            if len(_CLASSES_READ) >= 4096:
                _CLASSES_READ.clear()
            _CLASSES_READ[token.value] = (got.ranges, got.negated)
        return got

    def _read_class(self, token: Tok, span: Span) -> CharClass:
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
        if len(piece) == 2 and piece[1] in _CLASS_ESCAPES:  # a one-letter escape (what _decode reads it as)
            return ord(_CLASS_ESCAPES[piece[1]])
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
            expr = self._regex(span, args)
        elif name.value in ("TagDispatch", "Substring", "Token", "ExcludeToken", "TokenTagDispatch"):
            try:
                arguments = read_arguments(args, rpar)
                if name.value == "TokenTagDispatch":  # token-level macros: .token_macros
                    expr = token_tag_dispatch(arguments, span)
                elif name.value in ("Token", "ExcludeToken"):
                    expr = token_set(name.value, arguments, span)
                else:
                    expr = (self._tag_dispatch if name.value == "TagDispatch" else self._substring)(span, arguments)
            except MacroArgumentError as error:
                self._report(error.span, error.message)
                self._hidden_references(args, rpar)
                return Literal("", span)
        else:
            self._hidden_references(args, rpar)
            return self._refuse(f"{name.value}(...)", span)
        if name.value in ("ExcludeToken", "TokenTagDispatch") and stop_tokens_as_terminals():
            return self._refuse(f"{name.value}(...)", span)  # checked first: XGrammar's messages stay
        self._macro_results[id(expr)] = (expr, name.value)
        return expr

    def _hidden_references(self, args: list[Tok | Nested], rpar: Tok) -> None:
        """Rule names among a refused or broken macro call's arguments still count as
        references, so that an undefined one is reported and the rules it names are not
        called unreachable."""
        flat = [token for arg in args for token in (arg.tokens() if isinstance(arg, Nested) else [arg])] + [rpar]
        for token, following in zip(flat, flat[1:]):
            is_key = following.type == "EQUAL"  # loop_after_dispatch=..., excludes=...
            if token.type == "NAME" and not is_key and token.value not in _RESERVED_WORDS:
                self._macro_refs.append(RuleRef(token.value, self._span(token)))

    def _macro_string(self, value: MacroValue) -> bytes:
        """A string argument's UTF-8 bytes (escapes as in string literals; bad ones reported)."""
        token = value.token
        assert token is not None
        code_points = self._decode(token.value[1:-1], token.start_pos + 1, _STRING_ESCAPES)
        return "".join(map(chr, code_points)).encode("utf-8", "surrogatepass")

    def _tag_dispatch(self, span: Span, arguments: MacroArguments) -> Expr:
        """``TagDispatch((tag, rule), ..., loop_after_dispatch=..., excludes=(...))``, checked as
        XGrammar 0.2.8's parser checks it (its messages), then :mod:`.tag_dispatch`."""
        for key, at in arguments.name_spans.items():
            if key not in ("loop_after_dispatch", "excludes"):
                raise MacroArgumentError(f"Unknown named argument for TagDispatch: {key}", at)
        tags: list[tuple[bytes, RuleRef]] = []
        for value in arguments.positional:
            if value.kind != "tuple":
                raise MacroArgumentError("Each tag dispatch element must be a tuple", value.span)
            if len(value.elements) != 2:
                raise MacroArgumentError("Each tag dispatch element must be a pair (tag, rule)", value.span)
            tag, rule = value.elements
            tag_bytes = self._macro_string(tag) if tag.kind == "string" else b""
            if not tag_bytes:
                raise MacroArgumentError("Tag must be a non-empty string literal", tag.span)
            if rule.kind != "identifier":
                raise MacroArgumentError("Rule reference must be an identifier", rule.span)
            assert rule.token is not None
            tags.append((tag_bytes, RuleRef(rule.token.value, rule.span)))
        loop = arguments.named.get("loop_after_dispatch")
        if loop is not None and loop.kind != "boolean":
            raise MacroArgumentError("loop_after_dispatch must be a boolean literal", loop.span)
        excludes: list[bytes] = []
        listed = arguments.named.get("excludes")
        if listed is not None:
            if listed.kind != "tuple":
                raise MacroArgumentError("excludes must be a tuple", listed.span)
            for value in listed.elements:
                exclude = self._macro_string(value) if value.kind == "string" else b""
                if not exclude:
                    raise MacroArgumentError("Exclude must be a non-empty string literal", value.span)
                if any(tag.startswith(exclude) for tag, _ in tags):
                    message = (
                        f"Exclude string must not be a prefix of trigger string: {exclude.decode(errors='replace')}"
                    )
                    raise MacroArgumentError(message, value.span)
                excludes.append(exclude)
        return tag_dispatch_automaton(
            tags, loop_after_dispatch=loop is None or loop.boolean, excludes=excludes, span=span
        )

    def _substring(self, span: Span, arguments: MacroArguments) -> Expr:
        """``Substring("c1", ...)``: strings only, no named arguments (XGrammar's checks)."""
        if arguments.named:
            raise MacroArgumentError("Substring() does not accept named arguments", span)
        for value in arguments.positional:
            if value.kind != "string":
                raise MacroArgumentError("Substring() arguments must be strings", value.span)
        return substring_automaton([self._macro_string(value) for value in arguments.positional], span)

    def _regex(self, span: Span, parts: list[Tok | Nested]) -> Expr:
        """``Regex("pattern", json_string=true|false, flags="...")``: checked as XGrammar's parser
        does, then lowered exactly by :mod:`.regex`; a regex problem points at its character in
        the text, a bad flag at the flags string."""
        arguments: list[list[Tok | Nested]] = [[]]
        for part in parts:
            if isinstance(part, Tok) and part.type == "COMMA":
                arguments.append([])
            else:
                arguments[-1].append(part)
        positional: list[Tok | Nested] = []
        json_string = False
        flags: str | None = None  # absent is not "" (XGrammar: without flags, '.' matches a newline)
        flags_span = span
        for argument in arguments if parts else []:
            if len(argument) == 3 and isinstance(argument[0], Tok) and _token_type(argument[1]) == "EQUAL":
                key, value = argument[0].value, argument[2]
                if key == "flags":
                    if not (isinstance(value, Tok) and value.type == "STRING"):
                        self._report(span, "flags must be a string")
                        return Literal("", span)
                    flags = "".join(map(chr, self._decode(value.value[1:-1], value.start_pos + 1, _STRING_ESCAPES)))
                    flags_span = (value.start_pos, value.end_pos)
                elif key != "json_string":
                    self._report(span, f"Regex does not support the named argument {key}")
                elif not (isinstance(value, Tok) and value.value in _RESERVED_WORDS):
                    self._report(span, "json_string must be a boolean (true or false)")
                else:
                    json_string = value.value == "true"
            elif len(argument) == 1:
                positional.append(argument[0])
            else:
                self._report(
                    span, 'Regex arguments are one string, json_string=true|false and flags="...", separated by commas'
                )
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
            expr = regex_to_expr(
                "".join(map(chr, code_points)),
                json_string=json_string,
                flags=flags,
                warnings=warnings,
                span=span,
                deadline=self.deadline,
            )
        except RegexError as error:
            message = error.message if error.refused else f"XGrammar rejects this regex: {error.message}"
            self._report(flags_span if error.in_flags else located(error.start, error.end), message)
            return Literal("", span)
        for warning in warnings:
            self._report(located(warning.start, warning.end), warning.message, "warning")
        return _with_span(expr, span)

    def group(self, lpar: Tok, inner: Expr | None, rpar: Tok) -> Expr:
        """The inner expression, its span widened to the parentheses; ``()`` is ε."""
        span = (lpar.start_pos, rpar.end_pos)
        if inner is None:  # "()": XGrammar's other spelling of ""
            return Literal("", span)
        cls = inner.__class__  # (made directly for the common nodes: XGrammar's EBNF is mostly parentheses)
        if cls is Sequence:
            grouped = Sequence(inner.items, span)
        elif cls is Choice:
            grouped = Choice(inner.options, span)
        elif cls is Literal:
            grouped = Literal(inner.text, span)
        else:
            grouped = replace(inner, span=span)
        if id(inner) in self._macro_results:  # "(Substring(...))" is still the macro for XGrammar
            self._macro_results[id(grouped)] = (grouped, self._macro_results[id(inner)][1])
        return grouped

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
        elif id(body) in self._macro_results:
            self._report(
                span, f"XGrammar does not allow {self._macro_results[id(body)][1]}(...) as a lookahead assertion"
            )
        self._report(span, LOOKAHEAD_DROPPED, "warning")
        return _Lookahead(body, span)

    def rule(self, name: Tok, attributes: Tok | None, body: Expr, lookahead: _Lookahead | None) -> None:
        name_span = (name.start_pos, name.end_pos)
        line_start = self.text.rfind("\n", 0, name_span[0]) + 1
        if self.text[line_start : name_span[0]].strip():
            self._unclosed_before(line_start, name_span[0], name.value)
            self._report(name_span, f"rule {name.value!r} must start on a new line")
        # A rule may be named like a macro (XGrammar allows it) but never referenced: a
        # reference would read as a macro call.
        if name.value in _RESERVED_WORDS:
            self._report(name_span, f"{name.value!r} is reserved in XGrammar's EBNF")
        read = self._attributes(attributes, name.value) if attributes is not None else None
        end = lookahead.span[1] if lookahead else body.span[1]  # type: ignore[index]
        rule = Rule(name.value, body, (name_span[0], end))
        macro_refs, self._macro_refs = tuple(self._macro_refs), []
        hidden = lookahead.body if lookahead else None
        shaping = None
        if read is not None and ("lazy" in read or "max_chars" in read):
            shaping = _Shaping(bool(read.values.get("lazy")), read.values.get("max_chars"), self._span(attributes))  # type: ignore[arg-type]
        self.definitions.append(_Definition(rule, name_span, hidden, macro_refs, shaping))

    def _unclosed_before(self, line_start: int, name_start: int, name: str) -> None:
        """A rule head after a ``)`` that closes a ``(`` of an earlier line: what the editor's
        auto-closed ``)`` gives when Enter pushes it down and the author types the next rule
        after it (issue 35.3). The mistake is the ``(`` left open on its line: say so there."""
        before = self.text[line_start:name_start].rstrip()
        if not before or before.strip(") \t") or not self.definitions:  # only the pushed-down ')' before it
            return
        closer = line_start + len(before) - 1
        opened = open_parentheses(self.text, self.definitions[-1].rule.span[0], closer)
        if opened and opened[-1] < line_start:
            message = (
                f"this '(' is never closed on its line: the ')' that closes it is the one before rule {name!r}, "
                f"on a later line; close the group where it ends and start {name!r} on a new line"
            )
            self._report((opened[-1], opened[-1] + 1), message)

    def _attributes(self, token: Tok, rule_name: str) -> RuleAttributes | None:
        """Read the block as XGrammar does (:mod:`.rule_attributes`). Refuse ``max_tokens`` and rule
        ids; warn about what leaves the masks alone (captures, ``temperature``); ``lazy`` and
        ``max_chars`` change the language and are applied to the rule afterwards."""
        span = self._span(token)
        try:
            attributes = read_attributes(token.value, rule_name)
        except AttributeError_ as error:
            what = "unknown" if error.unknown else "bad"
            self._report(span, f"{what} rule attributes {token.value}: {error.message}")
            return None
        if "max_tokens" in attributes:
            self._refuse("max_tokens", span)
        if "capture_hidden_body_rule_id" in attributes:
            self._refuse("capture_hidden_body_rule_id", span)
        if any(keyword in attributes for keyword in _CAPTURE_ATTRIBUTES):
            self._report(span, CAPTURE_DROPPED, "warning")
        if "temperature" in attributes:
            self._report(span, TEMPERATURE_KEPT, "warning")
        return attributes


_SIMPLE_QUANTIFIERS = {"STAR": (0, None), "PLUS": (1, None), "QMARK": (0, 1)}
_CAPTURE_ATTRIBUTES = ("capture", "stop_capture", "capture_hidden_suffix_bytes", "capture_hidden_stop_bytes")


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
    warn_unreachable: bool = True,
) -> tuple[dict[str, _Definition], set[str] | None, tuple | None]:
    """Duplicates, undefined references, the root rule and reachability, over the whole grammar;
    with each name's first definition, the names the root reaches through bodies (None where that cannot be known:
    no root rule, or rules that did not parse). ``warn_unreachable=False``: the unreachable-rule
    warnings are not made; instead ``(where they go in diagnostics, the rules, a function that
    makes them)``, else None."""
    rules: dict[str, _Definition] = {}  # each name's first definition
    first_span: dict[str, Span] = {}
    body_refs: dict[str, tuple[RuleRef, ...]] = {}  # of each name's first definition
    for definition in definitions:
        name = definition.name
        if name in rules:
            line, _ = position_of(text, first_span[name][0])
            message = f"rule {name!r} is defined twice (first on line {line})"
            diagnostics.append(_diagnostic(text, definition.name_span, message))
            continue
        rules[name] = definition
        first_span[name] = definition.name_span
    known = rules.keys() | broken_names
    allowed = known | set(_RESERVED_WORDS)
    for definition in definitions:
        refs, names = _definition_references(definition)
        if rules[definition.name] is definition:
            body_refs[definition.name] = refs
        if names <= allowed:
            continue
        # (read again where they are: a moved definition's references have its parse's spans)
        for ref in (
            _body_references(definition.rule.body) + _body_references(definition.lookahead) + definition.macro_refs
        ):
            if ref.name not in known and ref.name not in _RESERVED_WORDS:
                assert ref.span is not None
                message = f"undefined rule {ref.name!r}" + _did_you_mean(ref.name, known)
                diagnostics.append(_diagnostic(text, ref.span, message))
    reached = unwarned = None
    if root not in known:
        diagnostics.append(_diagnostic(text, (0, 0), f"the grammar has no root rule {root!r}"))
    elif not broken_names:  # with unparsed rules we cannot know who references whom
        reached = _reachable(root, body_refs, {})
        unreachable = body_refs.keys() - reached
        if warn_unreachable:
            _warn_unreachable(text, root, definitions, body_refs, first_span, unreachable, diagnostics)
        elif unreachable:
            unwarned = (
                len(diagnostics),
                unreachable,
                partial(_warn_unreachable, text, root, definitions, body_refs, first_span, unreachable, []),
            )
    return rules, reached, unwarned


_DEFINITION_REFS: dict[int, tuple[object, tuple[RuleRef, ...], frozenset[str]]] = {}
_DEFINITION_REFS_KEPT = 4096


def _definition_references(definition) -> tuple[tuple[RuleRef, ...], frozenset[str]]:
    """A definition's body references and the names it references anywhere (body, lookahead, refused
    macros), kept by its identity (with it, so the identity stays its own): the parse's caches give
    every grammar with the same rule chunk the same definition objects (XGrammar's basic_* rules)."""
    if definition.__class__ is _MovedDefinition:
        definition = definition._of  # the same names (the references' spans are the parse's)
    kept = _DEFINITION_REFS.get(id(definition))
    if kept is not None and kept[0] is definition:
        return kept[1], kept[2]
    refs = definition.body_refs
    names = frozenset(ref.name for ref in refs + definition.hidden_refs)
    if len(_DEFINITION_REFS) >= _DEFINITION_REFS_KEPT:
        _DEFINITION_REFS.clear()  # derived data only: dropped whole
    _DEFINITION_REFS[id(definition)] = (definition, refs, names)
    return refs, names


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
    for name, group in _left_recursive_groups(rules):
        listed = ", ".join(repr(g) for g in group)
        message = LEFT_RECURSION_NOTE.format(rules=("rule " if len(group) == 1 else "rules ") + listed)
        span = rules[name].span
        start = span[0] if span else 0
        diagnostics.append(_diagnostic(text, (start, start + len(name)), message, "info"))


_LEFT_GROUPS: dict[tuple[int, ...], tuple[tuple[Rule, ...], tuple]] = {}
_LEFT_GROUPS_KEPT = 256


def _left_recursive_groups(rules: dict[str, Rule]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(first rule, group)`` per group of mutually left-recursive rules, in source order; kept by the
    rules' identities (a group depends on the rules alone, its place is read from their spans): the
    parse's chunk cache gives a grammar parsed again the same rule objects, and this analysis over
    XGrammar's basic_* rules was half of a small JSON Schema's parse."""
    if not any(_body_references(rule.body) for rule in rules.values()):
        return ()  # no rule names another (a {const: ...} schema's root alone): no left corner at all
    key = tuple(map(id, rules.values()))
    kept = _LEFT_GROUPS.get(key)
    if kept is not None and all(a is b for a, b in zip(kept[0], rules.values())):
        return kept[1]
    nullable = _nullable_rules(rules)
    left = {name: _leftmost(rule.body, nullable) & rules.keys() for name, rule in rules.items()}
    component = _components(left)  # a group: the rules that reach each other (a strongly connected part)
    members: dict[int, list[str]] = {}
    for name in rules:  # source order
        members.setdefault(component[name], []).append(name)
    done: set[str] = set()
    groups = []
    for name in rules:  # source order
        group = members[component[name]]
        if name in done or (len(group) == 1 and name not in left[name]):  # not left-recursive
            continue
        done.update(group)
        groups.append((name, tuple(group)))
    if len(_LEFT_GROUPS) >= _LEFT_GROUPS_KEPT:
        _LEFT_GROUPS.clear()  # derived data only: dropped whole
    _LEFT_GROUPS[key] = (tuple(rules.values()), tuple(groups))
    return tuple(groups)


def _components(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's strongly connected component (Tarjan's, iterative: a chain of rules is as deep
    as it is long), as a number; an edge to a name outside ``graph`` is not followed. Where every
    rule's reach was walked before, parsing a chain of 800 left-recursive rules took 0.19 s."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}
    closed = 0  # components numbered so far
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, kids = work[-1]
            for kid in kids:
                if kid not in graph:
                    continue
                if kid not in index:
                    index[kid] = low[kid] = len(index)
                    stack.append(kid)
                    on_stack.add(kid)
                    work.append((kid, iter(sorted(graph[kid]))))
                    break
                if kid in on_stack:
                    low[node] = min(low[node], index[kid])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = closed
                        if member == node:
                            break
                    closed += 1
    return component


def _nullable_rules(rules: dict[str, Rule]) -> set[str]:
    """NULLABLE: the rules that can match the empty string (a least fixpoint, by worklist: a rule
    is looked at again only when a rule its body names turns out nullable; sweeping every rule
    until nothing changed took 0.37 s on a chain of 800 rules that end in an empty one)."""
    users: dict[str, list[str]] = {}
    for name, rule in rules.items():
        for ref in _body_references(rule.body):
            users.setdefault(ref.name, []).append(name)
    nullable: set[str] = set()
    todo = list(reversed(rules))
    while todo:
        name = todo.pop()
        if name not in nullable and _nullable(rules[name].body, nullable):
            nullable.add(name)
            todo += (user for user in users.get(name, ()) if user not in nullable)
    return nullable


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
        return expr.nullable()  # a Regex's automaton; TagDispatch and Substring: the start is final
    if isinstance(expr, TokenSet):
        return False  # one whole token
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
    unreachable: set[str],
    diagnostics: list[Diagnostic],
) -> list[Diagnostic]:
    """Warn at each rule the root cannot reach (``unreachable``: those its bodies do not); say so
    when a dropped or refused construct did. Returns ``diagnostics``, the warnings appended."""
    hidden = {d.name: d.hidden_refs for d in definitions}
    with_hidden = _reachable(root, body_refs, hidden)
    for name in unreachable:
        note = " (only dropped or refused constructs use it)" if name in with_hidden else ""
        message = f"rule {name!r} is unreachable from {root!r}{note}"
        diagnostics.append(_diagnostic(text, name_spans[name], message, "warning"))
    return diagnostics


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


_REFS: dict[int, tuple[Expr, tuple[RuleRef, ...]]] = {}
_REFS_KEPT = 4096


def _body_references(expr: Expr | None) -> tuple[RuleRef, ...]:
    """:func:`_references` of one expression, kept by its identity (with the expression, so the identity
    stays its own): the checks ask it of every rule body up to three times, and the parse's chunk cache
    gives the same body objects to every grammar with the same rule at the same place (XGrammar's
    basic_* rules)."""
    if expr is None:
        return ()
    kept = _REFS.get(id(expr))
    if kept is not None and kept[0] is expr:
        return kept[1]
    refs = _references(expr)
    if len(_REFS) >= _REFS_KEPT:
        _REFS.clear()  # derived data only: dropped whole
    _REFS[id(expr)] = (expr, refs)
    return refs


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
        elif isinstance(expr, Automaton):  # TagDispatch's rules are its edges' labels
            todo += reversed([label for _, label, _ in expr.edges if not isinstance(label, tuple)])
    return tuple(out)
