"""The author's analyses (cfgzip_lab.grammar.authoring): FIRST and FOLLOW as literals, shortest
sentences, the rules that never end (and the empty-language error pointing at them), the
run-together lint (its example string checked against XGrammar), hints for regex habits."""

from __future__ import annotations

import pytest
from paths import BUNDLED, grammar_id

from cfgzip_lab.grammar.authoring import (
    first_terminals,
    follow_terminals,
    hint,
    never_ending,
    run_together_lint,
    shortest_sentences,
    with_hints,
)
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import check_ebnf, parse_ebnf
from cfgzip_lab.pipeline import compile_grammar

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""


def _texts(terms) -> list[str]:
    return [t.text for t in terms]


def test_first_and_follow_are_the_grammars_own_terminals():
    ast = parse_ebnf(ROBOT)
    first = first_terminals(ast)
    assert _texts(first["turn"]) == ['"left"', '"right"'] and _texts(first["root"]) == ['"turn"', '"go"']
    assert {t.rule for t in first["root"]} == {"command"}  # written in rule command
    follow = follow_terminals(ast)
    assert follow["turn"] == (follow["turn"][0], True) and _texts(follow["turn"][0]) == ['";"']
    ws, ends = follow["ws"]
    assert set(_texts(ws)) == {'"turn"', '"go"', '"left"', '"right"', "[0-9]"} and not ends
    assert follow["root"] == ((), True)


def test_follow_through_repetitions_and_nullable_tails():
    ast = parse_ebnf('root ::= item ("," item)* end?\nitem ::= [a-z]+\nend ::= "."\n')
    items, ends = follow_terminals(ast)["item"]
    assert set(_texts(items)) == {'","', '"."'} and ends


def test_shortest_sentences_and_rules_that_never_end():
    ast = parse_ebnf(ROBOT)
    short = shortest_sentences(ast)
    assert short["turn"] == (4, "left") and short["ws"] == (0, "") and short["root"] == (3, "go0")
    big = shortest_sentences(parse_ebnf('root ::= "ab"{1000}\n'))["root"]
    assert big[0] == 2000 and len(big[1]) <= 161
    ast = parse_ebnf('root ::= "go" cmd | "a" nothing\ncmd ::= "x" cmd\nnothing ::= []\n')
    assert never_ending(ast) == ["cmd", "nothing"]
    assert shortest_sentences(ast)["root"] is None


def test_an_empty_language_points_at_the_rule_that_never_ends():
    text = 'root ::= "go" ws cmd\nws ::= " "*\ncmd ::= "x" cmd\n'
    with pytest.raises(GrammarError) as info:
        compile_grammar(text)
    (diag,) = info.value.diagnostics
    assert (diag.line, diag.column) == (3, 1)
    assert "rule 'cmd' never ends" in diag.message and "language of 'root' is empty" in diag.message


def test_the_run_together_lint_finds_what_let_turnleft_through():
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string

    found = run_together_lint(parse_ebnf(ROBOT))
    assert [(d.line, d.column, d.severity) for d in found] == [(2, 20, "warning"), (2, 35, "warning")]
    assert "'turnleft' is accepted" in found[0].message and "'go0' is accepted" in found[1].message
    grammar = xgrammar.Grammar.from_ebnf(ROBOT)
    for example in ("turnleft", "go0"):  # what the warnings say, XGrammar does
        assert _is_grammar_accept_string(grammar, example)
    fixed = ROBOT.replace('"turn" ws turn | "go" ws number', '"turn" sep turn | "go" sep number') + "sep ::= [ \\t]+\n"
    assert run_together_lint(parse_ebnf(fixed)) == []


@pytest.mark.parametrize("path", BUNDLED, ids=grammar_id)
def test_the_lint_is_quiet_on_the_bundled_grammars(path):
    """Numbers' exponents ([eE] [+-]? [0-9]+) and identifiers run together on purpose: no keyword."""
    assert run_together_lint(parse_ebnf(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize(
    "text, wanted",
    [
        ("root ::= \\d+", "\\d is a regex shorthand, not EBNF: write [0-9]"),
        ("root ::= [\\d]+", "write its ranges, 0-9"),
        ("root ::= \\w", "write [A-Za-z0-9_]"),
        ("root ::= [\\s]", "write its ranges,  \\t\\n\\r\\f\\v"),
        ("root ::= .", "'.' is not 'any character'"),
    ],
)
def test_hints_for_regex_habits(text, wanted):
    diagnostics = with_hints(check_ebnf(text), text)
    assert any(wanted in d.message for d in diagnostics), [d.message for d in diagnostics]


def test_no_hint_where_none_applies():
    text = 'root ::= "a" missing'
    (d,) = check_ebnf(text)
    assert hint(d, text) == "" and with_hints([d], text) == [d]
