"""Dead ends (cfgzip_lab/grammar/dead_ends.py): a path that consumes bytes and then can never
finish is refused with its place, because XGrammar lets decoding into it and GNF cannot; a
non-productive symbol that nothing can reach after consumed bytes is harmless and kept."""

from __future__ import annotations

import pytest

from cfgzip_lab.engine import compile_engines
from cfgzip_lab.grammar.dead_ends import dead_ends
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.pipeline import build_classes, bundled_grammars, compile_grammar
from cfgzip_lab.verify import verify_lossless
from cfgzip_lab.vocab import load_vocab

# grammar text, (line, column) of the refusal, words of the message
REFUSED = [
    ('root ::= "a" [] | "b"\n', (1, 14), "matches nothing"),
    ('root ::= "a" x | "b"\nx ::= "c" x\n', (1, 14), "recurses with no way out"),
    ('root ::= y | "b"\ny ::= "a" y\n', (2, 11), "recurses with no way out"),
    ('root ::= "b" | ("a" [^\\x00-\\U0010FFFF])\n', (1, 21), "matches nothing"),
    ('root ::= "b" | "q"? ws? z\nws ::= " "\nz ::= "x" z\n', (1, 25), "rule z"),
    ('root ::= "b" | x "a"\nx ::= "c" x\n', (2, 11), "rule x"),
]
# non-productive symbols that no consumed byte can reach: kept, and lossless
KEPT = [
    'root ::= [] | "b"\n',
    'root ::= "b" | x\nx ::= x\n',
]


@pytest.mark.parametrize("text, where, words", REFUSED, ids=range(len(REFUSED)))
def test_text__position__message__refused(text, where, words):
    with pytest.raises(GrammarError) as caught:
        compile_grammar(text)
    first = caught.value.diagnostics[0]
    assert (first.line, first.column) == where and "dead end" in first.message and words in first.message


@pytest.mark.parametrize("text", KEPT, ids=range(len(KEPT)))
def test_unreachable_non_productive_symbols_are_kept(text):
    assert dead_ends(lower(parse_ebnf(text))) == []
    compile_grammar(text)


def test_no_bundled_grammar_has_a_dead_end():
    for name, path in bundled_grammars().items():
        assert dead_ends(lower(parse_ebnf(path.read_text(encoding="utf-8")))) == [], name


@pytest.fixture(scope="module")
def smollm2():
    return load_vocab("smollm2")


@pytest.mark.slow
def test_xgrammar_enters_the_dead_end_that_is_refused(smollm2):
    """Why the refusal: plain XGrammar accepts the token 'a' where no string can ever finish,
    which the classes (built from GNF) could never allow."""
    engines = compile_engines('root ::= "a" [] | "b"\n', smollm2)
    matcher = engines.plain()
    (a,) = smollm2.encode("a")
    assert matcher.accept_token(a)


@pytest.mark.slow
@pytest.mark.parametrize("text", KEPT, ids=range(len(KEPT)))
def test_kept_grammars_are_lossless(text, smollm2):
    classes = build_classes(compile_grammar(text), smollm2).classes
    report = verify_lossless(text, smollm2, classes, walks=8, steps=6)
    assert report.ok and report.steps_checked > 0, report.first_mismatch
