"""Tokens and a recursive-descent parser for XGrammar's EBNF (one rule chunk at a time).

This replaced a lark LALR(1) parser (lark 1.3.1, ``parser="lalr"``, ``lexer="basic"``)
whose costs were lark itself: 50 ms to import it, 45 ms to build its tables on the first
parse of a process, and a tree plus a ``Transformer`` pass per chunk (c_like 21 ms, json
1.9 ms warm). Here one master regex lexes and a hand-written parser calls the semantic
actions of a *builder* directly, with no tree in between (numbers: ``benchmarks/front_end.py``).

The grammar, as the LALR parser had it::

    start      : rule*
    rule       : RULE_NAME ATTRIBUTES? ASSIGN choices lookahead?
    lookahead  : LOOKAHEAD choices RPAR
    choices    : sequence (VBAR sequence)*
    sequence   : item+
    item       : atom quantifier?
    quantifier : STAR | PLUS | QMARK | LBRACE INT (COMMA (INT | NAME)?)? RBRACE
    atom       : STRING | CHAR_CLASS | NAME | TOKEN_REF | LPAR choices? RPAR
               | MACRO LPAR macro_arg* RPAR
    macro_arg  : STRING | INT | NAME | MACRO | COMMA | EQUAL | LPAR macro_arg* RPAR

Lexing is lark's basic lexer exactly: the terminals are tried in lark's order (priority,
then longest possible match, then pattern length), the first that matches wins, and the
first character no terminal matches is an error the parser meets when it gets there
(lark's lexer is pulled token by token, so an earlier syntax error wins).

Error reports say what the LALR(1) parser said, so diagnostics did not change: an LR parser
stops at the first token that no sentence can continue with (so does this one), but what it
*expects* there is the action set of the state it stopped in, after the reductions that the
token's merged LALR lookaheads allowed. Worked out on lark's tables and pinned by
``tests/test_ebnf_parser.py`` (the old parser side by side, on the corpus and on fuzzed text):

- after an atom, a token that no context accepts (``,``, ``=``, ``}``, an integer, ``::=``,
  an attribute block) is reported in the atom's own state: :data:`AFTER_ATOM`; after a
  quantifier: :data:`AFTER_ITEM` (so ``"a"**`` and ``"a"{2}?``);
- a closer that only another context accepts (``)`` at rule level; ``(=``, a rule head or the
  end inside parentheses) reduces up to the innermost ``choices`` and is reported there: at
  rule level :data:`RULE_END` (``(=``, a rule head, the end), in a group or a lookahead ``)``;
- after a rule's lookahead, only a rule head or the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol

__all__ = ["Tok", "Nested", "ParseFailure", "tokens", "parse_chunk", "MACROS", "NAME_PATTERN", "GAP_PATTERN"]

MACROS = ("TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken", "Regex", "Substring")
NAME_PATTERN = r"[A-Za-z_.\-][A-Za-z0-9_.\-]*"
# Whitespace and comments between tokens. A comment must run to the end of its line:
# otherwise "# # # #" could split in exponentially many ways when a lookahead fails.
GAP_PATTERN = r"(?:[ \t\r\n]|#[^\r\n]*(?![^\r\n]))*"

# lark's terminal order (priority, then max width, then pattern length; see the module
# docstring). RULE_NAME looks ahead for ``::=`` (after an attribute block, or whitespace and
# comments): that lookahead is what ends a rule body at the next rule head with one token
# of lookahead. Strings, classes and comments never span lines.
_TERMINALS = (
    # (the name possessive: a shorter prefix of a name is followed by a name character, never by the
    # lookahead's '[' or gap, so backing off it only retried the lookahead once per character)
    ("RULE_NAME", rf"[A-Za-z_.\-][A-Za-z0-9_.\-]*+(?=\[[^\]\r\n]*\][ \t]*::=|{GAP_PATTERN}::=)"),
    ("ATTRIBUTES", r"\[[^\]\r\n]*\](?=[ \t]*::=)"),
    ("MACRO", rf"(?:{'|'.join(MACROS)})(?![A-Za-z0-9_.\-])"),
    ("NAME", NAME_PATTERN),
    ("CHAR_CLASS", r"\[(?:[^\]\\\r\n]|\\[^\r\n])*\]"),
    ("STRING", r'"(?:[^"\\\r\n]|\\[^\r\n])*"'),
    ("TOKEN_REF", r"<[^<>\r\n]*>"),
    ("INT", r"[0-9]+"),
    ("ASSIGN", r"::="),
    ("LOOKAHEAD", r"\(="),
    ("COMMA", r","),
    ("EQUAL", r"="),
    ("LBRACE", r"\{"),
    ("LPAR", r"\("),
    ("PLUS", r"\+"),
    ("QMARK", r"\?"),
    ("RBRACE", r"\}"),
    ("RPAR", r"\)"),
    ("STAR", r"\*"),
    ("VBAR", r"\|"),
    ("ERROR", r"."),  # no terminal matches here: lark's UnexpectedCharacters
    ("EOF", r"\Z"),
)
# lark skipped whitespace and comments as terminals of their own (``%ignore``); no other
# terminal starts with whitespace or '#', so one match can take the gap and then the token
# (half the matches). The greedy gap never backtracks: ERROR or EOF always matches after it.
# The alternatives are tried in the order below, XGrammar's commonest tokens first: terminals that
# can match at the same place (the ones sharing a first character: RULE_NAME, MACRO and NAME;
# ATTRIBUTES and CHAR_CLASS; LOOKAHEAD and LPAR) keep their order above, ERROR and EOF come last, and
# every other terminal starts with a character of its own, so the same terminal matches everywhere.
_TRIED = ("LOOKAHEAD", "LPAR", "RPAR", "STRING", "ATTRIBUTES", "CHAR_CLASS", "RULE_NAME", "MACRO", "NAME", "STAR",
          "VBAR", "ASSIGN", "PLUS", "QMARK", "LBRACE", "INT", "COMMA", "RBRACE", "EQUAL", "TOKEN_REF", "ERROR", "EOF")  # fmt: skip
_PATTERNS = dict(_TERMINALS)
_LEXER = re.compile(
    r"(?:[ \t\r\n]|#[^\r\n]*)*(?:" + "|".join(f"(?P<{name}>{_PATTERNS[name]})" for name in _TRIED) + ")",
    re.DOTALL,
)

END = "$END"
ELEMENT_STARTS = frozenset({"STRING", "CHAR_CLASS", "NAME", "TOKEN_REF", "LPAR", "MACRO"})
QUANTIFIERS = frozenset({"STAR", "PLUS", "QMARK", "LBRACE"})
_CLOSERS = frozenset({"RPAR", "LOOKAHEAD", "RULE_NAME", END})
_MACRO_ARGS = frozenset({"STRING", "INT", "NAME", "MACRO", "COMMA", "EQUAL"})
_QUANTIFIER_ENDS = frozenset({"STAR", "PLUS", "QMARK", "RBRACE"})  # RBRACE only ever ends {m,n}

# What the LALR parser expected where it stopped (see the module docstring).
CHUNK_START = frozenset({"RULE_NAME", END})
RULE_END = frozenset({"LOOKAHEAD", "RULE_NAME", END})
AFTER_ITEM = ELEMENT_STARTS | {"VBAR"} | _CLOSERS
AFTER_ATOM = AFTER_ITEM | QUANTIFIERS
AFTER_LPAR = ELEMENT_STARTS | {"RPAR"}
IN_MACRO = _MACRO_ARGS | {"LPAR", "RPAR"}


class Tok(NamedTuple):
    """A token: its terminal, its text and its half-open offsets in the whole grammar text."""

    type: str
    value: str
    start_pos: int
    end_pos: int


@dataclass(frozen=True, slots=True)
class Nested:
    """A parenthesised macro argument ``( ... )``: its parentheses and what is between them."""

    lpar: Tok
    args: tuple[Tok | Nested, ...]
    rpar: Tok

    def tokens(self) -> list[Tok]:
        """Every token inside, parentheses included, in text order."""
        out = [self.lpar]
        for arg in self.args:
            out += arg.tokens() if isinstance(arg, Nested) else [arg]
        out.append(self.rpar)
        return out


class ParseFailure(Exception):
    """The first token no sentence continues with (``ERROR``: a character no terminal
    matches), and what the LALR(1) parser expected there."""

    def __init__(self, token: Tok, expected: frozenset[str]) -> None:
        super().__init__(token, expected)
        self.token = token
        self.expected = expected


def tokens(text: str, start: int, end: int) -> list[Tok]:
    """The tokens of ``text[start:end]`` (offsets in ``text``), up to and including the first
    ``ERROR``, then an ``$END`` token placed, as lark places it, at the end of the last token."""
    out: list[Tok] = []
    new = tuple.__new__  # Tok(...) through NamedTuple's __new__ costs a Python call per token
    for match in _LEXER.finditer(text, start, end):
        kind = match.lastgroup
        if kind == "EOF":
            break
        at, to = match.span(kind)
        out.append(new(Tok, (kind, text[at:to], at, to)))
        if kind == "ERROR":
            return out
    at = out[-1].end_pos if out else start
    out.append(Tok(END, "", at, at))
    return out


class Builder(Protocol):
    """The semantic actions, called bottom-up and left to right (a post-order, as lark's
    ``Transformer`` called them), so that diagnostics come out in the same order."""

    def literal(self, token: Tok): ...
    def char_class(self, token: Tok): ...
    def rule_ref(self, token: Tok): ...
    def token_ref(self, token: Tok): ...
    def macro_call(self, name: Tok, args: list[Tok | Nested], rpar: Tok): ...
    def group(self, lpar: Tok, inner, rpar: Tok): ...
    def quantifier(self, tokens: list[Tok]): ...
    def item(self, atom, quantifier): ...
    def sequence(self, items: list): ...
    def choices(self, options: list): ...
    def lookahead(self, opener: Tok, body, closer: Tok): ...
    def rule(self, name: Tok, attributes: Tok | None, body, lookahead) -> None: ...


def parse_chunk(toks: list[Tok], builder: Builder) -> None:
    """Parse one chunk's tokens (from :func:`tokens`), calling ``builder``; raises
    :class:`ParseFailure` at the first token that cannot continue the chunk."""
    _Parser(toks, builder).chunk()


class _Parser:
    __slots__ = ("toks", "i", "b")

    def __init__(self, toks: list[Tok], builder: Builder) -> None:
        self.toks = toks
        self.i = 0
        self.b = builder

    # An ``ERROR`` token (lark's lexer raised when the parser pulled it) is valid nowhere, so
    # the check that meets it raises ParseFailure, which the caller reports as a lexical error.

    def take(self, kind: str, expected: frozenset[str]) -> Tok:
        token = self.toks[self.i]
        if token.type != kind:
            raise ParseFailure(token, expected)
        self.i += 1
        return token

    def chunk(self) -> None:
        while True:
            token = self.toks[self.i]
            if token.type == END:
                return
            if token.type != "RULE_NAME":
                raise ParseFailure(token, CHUNK_START)
            self.rule()

    def rule(self) -> None:
        name = self.toks[self.i]
        self.i += 1
        attributes = None
        if self.toks[self.i].type == "ATTRIBUTES":
            attributes = self.toks[self.i]
            self.i += 1
            self.take("ASSIGN", frozenset({"ASSIGN"}))
        else:
            self.take("ASSIGN", frozenset({"ATTRIBUTES", "ASSIGN"}))
        body = self.choices()
        token = self.toks[self.i]
        lookahead = None
        if token.type == "LOOKAHEAD":
            self.i += 1
            inner = self.choices()
            closer = self.toks[self.i]
            if closer.type != "RPAR":
                raise ParseFailure(closer, frozenset({"RPAR"}))
            self.i += 1
            lookahead = self.b.lookahead(token, inner, closer)
            token = self.toks[self.i]
            if token.type not in CHUNK_START:
                raise ParseFailure(token, CHUNK_START)
        elif token.type not in CHUNK_START:  # a ')' with no '(' open
            raise ParseFailure(token, RULE_END)
        self.b.rule(name, attributes, body, lookahead)

    def choices(self) -> object:
        """``sequence (| sequence)*``; returns at a closer, which the caller checks."""
        options = [self.sequence()]
        while self.toks[self.i].type == "VBAR":
            self.i += 1
            options.append(self.sequence())
        return self.b.choices(options)

    def sequence(self) -> object:
        self.element_start(ELEMENT_STARTS)  # after '::=', '|' or '(=' (a '(' checked its own)
        items = [self.item()]
        while True:
            token = self.toks[self.i]
            kind = token.type
            if kind in ELEMENT_STARTS:
                items.append(self.item())
            elif kind == "VBAR" or kind in _CLOSERS:
                return self.b.sequence(items)
            else:  # a second quantifier, or a token that nothing accepts after an item
                after_quantifier = self.toks[self.i - 1].type in _QUANTIFIER_ENDS
                raise ParseFailure(token, AFTER_ITEM if after_quantifier else AFTER_ATOM)

    def item(self) -> object:
        atom = self.atom()
        token = self.toks[self.i]
        kind = token.type
        if kind not in QUANTIFIERS:
            return self.b.item(atom, None)
        self.i += 1
        parts = [token]
        if kind == "LBRACE":
            parts.append(self.take("INT", frozenset({"INT"})))
            token = self.toks[self.i]
            if token.type == "COMMA":
                self.i += 1
                parts.append(token)
                token = self.toks[self.i]
                if token.type in ("INT", "NAME"):
                    self.i += 1
                    parts.append(token)
                    parts.append(self.take("RBRACE", frozenset({"RBRACE"})))
                else:
                    parts.append(self.take("RBRACE", frozenset({"INT", "NAME", "RBRACE"})))
            else:
                parts.append(self.take("RBRACE", frozenset({"COMMA", "RBRACE"})))
        return self.b.item(atom, self.b.quantifier(parts))

    def atom(self) -> object:
        token = self.toks[self.i]  # an element start: the callers checked
        kind = token.type
        self.i += 1
        if kind == "STRING":
            return self.b.literal(token)
        if kind == "NAME":
            return self.b.rule_ref(token)
        if kind == "CHAR_CLASS":
            return self.b.char_class(token)
        if kind == "TOKEN_REF":
            return self.b.token_ref(token)
        if kind == "LPAR":
            inner = None
            if self.toks[self.i].type != "RPAR":
                self.element_start(AFTER_LPAR)
                inner = self.choices()
                closer = self.toks[self.i]
                if closer.type != "RPAR":
                    raise ParseFailure(closer, frozenset({"RPAR"}))
            rpar = self.toks[self.i]
            self.i += 1
            return self.b.group(token, inner, rpar)
        assert kind == "MACRO", kind
        self.take("LPAR", frozenset({"LPAR"}))
        args, rpar = self.macro_args()
        return self.b.macro_call(token, args, rpar)

    def element_start(self, expected: frozenset[str]) -> None:
        token = self.toks[self.i]
        if token.type not in ELEMENT_STARTS:
            raise ParseFailure(token, expected)

    def macro_args(self) -> tuple[list[Tok | Nested], Tok]:
        """Arguments up to the closing ``)``, which is returned too."""
        args: list[Tok | Nested] = []
        while True:
            token = self.toks[self.i]
            kind = token.type
            self.i += 1
            if kind == "RPAR":
                return args, token
            if kind in _MACRO_ARGS:
                args.append(token)
            elif kind == "LPAR":
                inner, rpar = self.macro_args()
                args.append(Nested(token, tuple(inner), rpar))
            else:
                self.i -= 1
                raise ParseFailure(token, IN_MACRO)
