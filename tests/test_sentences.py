"""Random sentences of a grammar: seeded, bounded, and every one accepted by XGrammar."""

from __future__ import annotations

import pytest

from cfgzip_lab.grammar.sentences import generate, shortest_lengths
from cfgzip_lab.pipeline import compile_grammar
from tests.grammar_tools import xgrammar_accepts_ebnf, xgrammar_matcher, xgrammar_matches
from tests.paths import BUNDLED, grammar_id, third_party_grammars

THIRD_PARTY = third_party_grammars()


def _compiled_or_skip(path):
    from cfgzip_lab.grammar.diagnostics import GrammarError

    text = path.read_text(encoding="utf-8")
    try:
        compiled = compile_grammar(text)
    except GrammarError as error:
        pytest.skip(f"cfgzip refuses it: {str(error).splitlines()[0]}")
    if any("lookahead" in w.message for w in compiled.warnings):
        pytest.skip("a dropped lookahead restricts XGrammar's language beyond ours")
    if not xgrammar_accepts_ebnf(text):
        pytest.skip("XGrammar refuses it")
    return text, compiled


@pytest.mark.parametrize("path", BUNDLED + THIRD_PARTY, ids=[grammar_id(p) for p in BUNDLED + THIRD_PARTY])
def test_generated_sentences_are_accepted_by_xgrammar(path):
    text, compiled = _compiled_or_skip(path)
    sentences = generate(compiled.cfg, 8, seed=3, max_depth=10, max_length=120)
    matcher = xgrammar_matcher(text)
    for s in sentences:
        assert compiled.gnf.accepts(s.data), s.data
        assert xgrammar_matches(matcher, s.data), s.data


def test_seeded_bounded_and_varied():
    compiled = compile_grammar('root ::= item ("," item)*\nitem ::= [a-z]+ | "(" root ")"\n')
    a = generate(compiled.cfg, 20, seed=1, max_length=30)
    assert a == generate(compiled.cfg, 20, seed=1, max_length=30)
    assert a != generate(compiled.cfg, 20, seed=2, max_length=30)
    assert len({s.data for s in a}) > 10
    # past the bound only shortest completions are added: a few bytes per open nesting level
    assert max(len(s.data) for s in a) < 30 + 2 * 12
    deep = generate(compiled.cfg, 5, seed=1, max_depth=0)
    assert all(s.data in (b"a", b"b") or len(s.data) == 1 for s in deep)


def test_way_out_terminates_on_ties():
    compiled = compile_grammar('root ::= a\na ::= b "x"\nb ::= a "y" | ""\n')
    assert shortest_lengths(compiled.cfg)["root"] == 1
    assert {s.data for s in generate(compiled.cfg, 5, max_depth=0)} == {b"x"}


def test_empty_class_branch_is_never_taken():
    compiled = compile_grammar('root ::= "a" | [^\\x00-\\U0010FFFF] "b"\n')
    assert {s.data for s in generate(compiled.cfg, 10)} == {b"a"}
