"""The recursive-descent EBNF parser against the LALR(1) parser it replaced, side by side.

``cfgzip_lab.grammar.ebnf_syntax`` must read exactly what the lark LALR(1) parser read and fail
where and as it failed (the same token, the same expected set), so that every diagnostic kept
its position and message. The lark grammar below is that parser's (lark's own basic lexer,
``%ignore`` for whitespace and comments, terminal priorities), built from the same name pattern
and macro list so that the two stay in step; a small adapter drives the same semantic actions
(``ebnf._Builder``) from lark's tree. Both run on a seeded sample of XGrammar's test grammars,
every bundled and third-party grammar, and fuzzed texts; ASTs and diagnostics must be equal.
(The full run, all 648 corpus files and 200,000 fuzzed texts, was done once by hand: 0 differences.)
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import pytest
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from paths import BUNDLED, CORPORA, third_party_grammars

from cfgzip_lab.grammar import ebnf
from cfgzip_lab.grammar.ebnf_syntax import GAP_PATTERN, MACROS, NAME_PATTERN, Nested, ParseFailure, Tok

CORPUS = CORPORA / "xgrammar-tests"  # absent in a bare clone: sample empty

_LARK_GRAMMAR = rf"""
start: rule*
rule: RULE_NAME ATTRIBUTES? ASSIGN choices lookahead?
lookahead: LOOKAHEAD choices RPAR
choices: sequence (VBAR sequence)*
sequence: item+
item: atom quantifier?
quantifier: STAR | PLUS | QMARK | LBRACE INT (COMMA (INT | NAME)?)? RBRACE
?atom: STRING                     -> literal
     | CHAR_CLASS                 -> char_class
     | NAME                       -> rule_ref
     | TOKEN_REF                  -> token_ref
     | LPAR choices? RPAR         -> group
     | MACRO LPAR macro_arg* RPAR -> macro_call
macro_arg: STRING | INT | NAME | MACRO | COMMA | EQUAL | LPAR macro_arg* RPAR

RULE_NAME.4: /{NAME_PATTERN}(?=\[[^\]\r\n]*\][ \t]*::=|{GAP_PATTERN}::=)/
ATTRIBUTES.3: /\[[^\]\r\n]*\](?=[ \t]*::=)/
MACRO.2: /(?:{"|".join(MACROS)})(?![A-Za-z0-9_.\-])/
NAME: /{NAME_PATTERN}/
INT: /[0-9]+/
STRING: /"(?:[^"\\\r\n]|\\[^\r\n])*"/
CHAR_CLASS: /\[(?:[^\]\\\r\n]|\\[^\r\n])*\]/
TOKEN_REF: /<[^<>\r\n]*>/
ASSIGN: "::="
LOOKAHEAD: "(="
LPAR: "("
RPAR: ")"
VBAR: "|"
STAR: "*"
PLUS: "+"
QMARK: "?"
LBRACE: "{{"
RBRACE: "}}"
COMMA: ","
EQUAL: "="
%ignore /[ \t\r\n]+/
%ignore /#[^\r\n]*/
"""


@cache
def _lark() -> Lark:
    return Lark(_LARK_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False)


class _LarkChunk:
    """Drives ``ebnf._Builder`` from lark's tree of one chunk (offsets shifted into the text)."""

    def __init__(self, builder: ebnf._Builder, offset: int) -> None:
        self.b = builder
        self.offset = offset

    def tok(self, token: Token) -> Tok:
        return Tok(token.type, token.value, self.offset + token.start_pos, self.offset + token.end_pos)

    def start(self, tree: Tree) -> None:
        for rule in tree.children:
            self.rule(rule)

    def rule(self, tree: Tree) -> None:
        name, *rest = tree.children
        attributes = self.tok(rest[0]) if rest[0].type == "ATTRIBUTES" else None
        body_at = 2 if attributes else 1
        body = self.expr(rest[body_at])
        lookahead = None
        if len(rest) > body_at + 1:
            opener, inner, closer = rest[body_at + 1].children
            lookahead = self.b.lookahead(self.tok(opener), self.expr(inner), self.tok(closer))
        self.b.rule(self.tok(name), attributes, body, lookahead)

    def expr(self, tree: Tree):
        kind, children = tree.data, tree.children
        if kind == "choices":
            return self.b.choices([self.expr(c) for c in children if isinstance(c, Tree)])
        if kind == "sequence":
            return self.b.sequence([self.expr(c) for c in children])
        if kind == "item":
            atom = self.expr(children[0])
            quantifier = self.b.quantifier([self.tok(t) for t in children[1].children]) if len(children) > 1 else None
            return self.b.item(atom, quantifier)
        if kind in ("literal", "char_class", "rule_ref", "token_ref"):
            return getattr(self.b, kind)(self.tok(children[0]))
        if kind == "group":
            inner = self.expr(children[1]) if len(children) == 3 else None
            return self.b.group(self.tok(children[0]), inner, self.tok(children[-1]))
        assert kind == "macro_call", kind
        return self.b.macro_call(self.tok(children[0]), [self.arg(a) for a in children[2:-1]], self.tok(children[-1]))

    def arg(self, tree: Tree) -> Tok | Nested:
        children = tree.children
        if len(children) == 1:
            return self.tok(children[0])
        return Nested(self.tok(children[0]), tuple(self.arg(a) for a in children[1:-1]), self.tok(children[-1]))


def _failure(error: UnexpectedInput, start: int) -> ParseFailure:
    """lark's error as the new parser reports it."""
    if isinstance(error, UnexpectedCharacters):
        at = start + error.pos_in_stream
        return ParseFailure(Tok("ERROR", "", at, at + 1), frozenset())
    assert isinstance(error, UnexpectedToken)
    token = error.token
    if token.type == "$END":  # lark borrows the last token's end
        at = start + (token.end_pos or 0)
        return ParseFailure(Tok("$END", "", at, at), frozenset(error.expected))
    return ParseFailure(
        Tok(token.type, token.value, start + token.start_pos, start + token.end_pos), frozenset(error.expected)
    )


def lark_analyse(text: str, root: str = "root"):
    """``ebnf._analyse`` with each chunk parsed by lark: (rules, diagnostics)."""
    diagnostics, definitions, broken_names = [], [], set()
    for start, end in ebnf._rule_chunks(text):
        builder = ebnf._Builder(text)
        try:
            tree = _lark().parse(text[start:end])
        except UnexpectedInput as error:
            diagnostics.append(ebnf._syntax_diagnostic(text, end, _failure(error, start), start))
            broken_names.update(m.group(1) for m in ebnf._RULE_HEAD.finditer(text, start, end))
            continue
        _LarkChunk(builder, start).start(tree)
        diagnostics += builder.diagnostics
        definitions += builder.definitions
    rules, _hidden = ebnf._whole_grammar(text, root, definitions, broken_names, diagnostics)  # 0 hidden: warned
    return rules, diagnostics


def new_analyse(text: str, root: str = "root"):
    ast, diagnostics = ebnf._analyse(text, root)
    return ast.rules, diagnostics


def _corpus_sample(n: int, seed: int) -> list[Path]:
    if not CORPUS.is_dir():
        return []
    files = sorted(CORPUS.rglob("*.ebnf"))
    return sorted(random.Random(seed).sample(files, min(n, len(files))))


FILES = BUNDLED + third_party_grammars() + _corpus_sample(80, seed=18)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_grammar_file_reads_as_the_lalr_parser_read_it(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert new_analyse(text) == lark_analyse(text)


FRAGMENTS = [
    "root", "x", "y.z", " ::= ", "::=", " ", "\n", "\t", "\r", "\r\n", "#c\n", "# x ::= y\n", '"a"', '""', r'"\n"',
    r'"\x41"', r'"\x41BC"', r'"\q"', r'"\u12"', "'a'", "[a-z]", "[^a]", "[]", "[a-]", "[z-a]", r"[\-]", r"[\d]",
    "|", "(", ")", "()", "*", "+", "?", "{", "}", "{1,2}", "{2}", "{2,}", "{3,1}", "{,2}", "{2,-1}", "(=",
    '(= "q")', "-", "-1", ".", "1", "2147483648", ",", "=", ":", "::", "true", "false", '"', "[", "]", "\\", ";",
    "@", "//", "/*", "<t>", "Regex", "Regex(", 'Regex("a")', 'Regex("a", json_string=true)', "json_string",
    "TagDispatch(", "Token(", "ExcludeToken(1)", "[max_tokens=3]", "[capture]", "[foo] ::=", "x ::= ",
    "\nx ::= ", "\nroot ::= ", "\nroot[capture] ::= ",
]  # fmt: skip


def _fuzzed(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        text = ("root ::= " if rng.random() < 0.7 else "") + "".join(rng.choices(FRAGMENTS, k=rng.randint(1, 14)))
        texts.append(text + ('\nx ::= "b"\ny.z ::= x' if rng.random() < 0.3 else ""))
    characters = 'ab"[]()|*+?{}0123,=-#\n :<>\\^'
    texts += ["root ::= " + "".join(rng.choices(characters, k=rng.randint(1, 20))) for _ in range(count)]
    return texts


def test_fuzzed_texts_read_and_fail_as_the_lalr_parser() -> None:
    """Token soup and character soup: every syntax error at the same token, expecting the same."""
    texts = _fuzzed(1500, seed=18)
    differing = [text for text in texts if new_analyse(text) != lark_analyse(text)]
    assert not differing, differing[:5]
    syntax_errors = sum(any(d.message.startswith("unexpected") for d in new_analyse(t)[1]) for t in texts)
    assert syntax_errors > len(texts) // 3  # the soup does reach the error paths


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'root ::= "a" )',
            "unexpected ')'; expected a rule definition 'name ::= ...', a lookahead '(= ...)' or the end",
        ),
        ('root ::= ("a" x ::= "b")', "unexpected 'x'; expected ')'"),
        ('root ::= "a" ,', "unexpected ','; expected an element (string, character class, rule name or '('), a quant"),
        ('root ::= "a"* ,', "unexpected ','; expected an element (string, character class, rule name or '('), a rule"),
        ('root ::= "a" (= "b") |', "unexpected '|'; expected a rule definition 'name ::= ...' or the end of the gra"),
        ("root ::= Regex(*)", "unexpected '*'; expected an integer, a name, a string, ',', '=', '(', ')' or MACRO"),
        ('root ::= "a"{1 "b"', """unexpected '"b"'; expected ',' or '}'"""),
        ('root ::= "a"{1, "b"', """unexpected '"b"'; expected an integer, a name or '}'"""),
        (
            "root ::= (",
            "this '(' is never closed: unexpected end of the grammar; expected an element (string, character class, "
            "rule name or '(') or ')'",
        ),
    ],
)
def test_expected_sets_are_the_lalr_states(text: str, message: str) -> None:
    """The reductions an LALR(1) parser makes before it fails decide what it expects (one row each)."""
    (diagnostic,) = ebnf.check_ebnf(text)
    assert diagnostic.message.startswith(message), diagnostic.message
    assert new_analyse(text) == lark_analyse(text)


def test_the_lexers_order_reads_the_priority_orders_tokens():
    """The lexer tries XGrammar's commonest terminals first, with a possessive name in RULE_NAME; it reads
    the same tokens as the alternatives in priority order with the plain name pattern, on the bundled
    and third-party grammars, a sample of XGrammar's and fuzzed texts of EBNF's characters."""
    import re

    from cfgzip_lab.grammar import ebnf_syntax as syntax

    patterns = dict(syntax._TERMINALS)
    patterns["RULE_NAME"] = NAME_PATTERN + patterns["RULE_NAME"].split("*+", 1)[1]
    assert patterns["RULE_NAME"].startswith(NAME_PATTERN + "(?=")
    reference = re.compile(
        r"(?:[ \t\r\n]|#[^\r\n]*)*(?:" + "|".join(f"(?P<{n}>{patterns[n]})" for n, _ in syntax._TERMINALS) + ")",
        re.DOTALL,
    )
    assert sorted(syntax._TRIED) == sorted(patterns) and syntax._TRIED[-2:] == ("ERROR", "EOF")

    def read(lexer, text):
        out = []
        for match in lexer.finditer(text):
            out.append((match.lastgroup, match.span(match.lastgroup)))
            if match.lastgroup in ("ERROR", "EOF"):
                break
        return out

    texts = [p.read_text(encoding="utf-8") for p in BUNDLED] + [
        p.read_text(encoding="utf-8") for p in third_party_grammars()
    ]
    rng = random.Random(11)
    corpus = sorted(CORPUS.glob("*.ebnf"))
    texts += [p.read_text(encoding="utf-8") for p in rng.sample(corpus, min(80, len(corpus)))]
    alphabet = list('abT_.-09 \t\n#"\\[]^()=:|*+?{},<>') + ["::=", "(=", "Regex", "Token", "root", "[lazy]", '"x"']
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))) for _ in range(3000)]
    for text in texts:
        assert read(syntax._LEXER, text) == read(reference, text), text[:80]
