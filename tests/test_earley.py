"""The Earley parser over the source rules (cfgzip_lab.grammar.earley): its verdicts are the GNF's
(on every bundled grammar's samples, their halves and a broken copy, and on generated sentences,
and on the third-party corpus' generated sentences), its trees are the author's derivation, and
a rejected sample gets its partial derivation and the expected literals with their rules."""

from __future__ import annotations

import pytest
from paths import BUNDLED, bundled_samples, grammar_id, third_party_grammars

from cfgzip_lab.grammar.earley import EarleyGrammar, ParseLimitError, describe_expected, parse_sample
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.sentences import generate
from cfgzip_lab.grammar.testlist import verdict_of
from cfgzip_lab.pipeline import compile_grammar

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""


def _texts(compiled, name: str | None, n: int = 8, seed: int = 1) -> list[str]:
    # a few samples of each (the big grammars' charts cost ~10 µs an item in Python)
    texts = [p.read_text(encoding="utf-8") for p in bundled_samples(name)[:3]] if name else []
    for s in generate(compiled.cfg, n, seed=seed, max_length=160):
        try:
            texts.append(s.data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return texts


def _leaves(node):
    """The terminals of a tree, left to right; a pattern (automaton) is one, whatever it holds."""
    if node.kind != "rule":
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _agree(grammar: EarleyGrammar, compiled, text: str) -> None:
    result = grammar.parse(text)
    kind, fit = verdict_of(compiled.gnf, text.encode("utf-8"))
    assert result.kind == kind, (text[:80], result.kind, kind)
    if kind == "rejected":
        assert len(text[: result.position].encode("utf-8")) == fit, (text[:80], result.position, fit)
    if result.accepted:  # the tree spans the whole sample and its leaves spell it
        assert (result.tree.start, result.tree.end) == (0, len(text))
        assert "".join(text[n.start : n.end] for n in _leaves(result.tree)) == text


@pytest.mark.parametrize("path", BUNDLED, ids=grammar_id)
def test_verdicts_are_the_gnfs_on_bundled_grammars(path):
    compiled = compile_grammar(path.read_text(encoding="utf-8"))
    grammar = EarleyGrammar(compiled.ast)
    for i, text in enumerate(_texts(compiled, path.stem, n=4)):
        for cut in (text, text[: len(text) // 2], text + "\x01") if i < 2 else (text,):
            _agree(grammar, compiled, cut)


THIRD = [p for p in third_party_grammars() if p.suffix == ".ebnf"][:8]


@pytest.mark.parametrize("path", THIRD, ids=grammar_id)
def test_verdicts_are_the_gnfs_on_third_party_grammars(path):
    try:
        compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
    except Exception as exc:  # grammars cfgzip refuses have no sentences to compare
        pytest.skip(f"not compiled: {str(exc)[:80]}")
    grammar = EarleyGrammar(compiled.ast)
    for text in _texts(compiled, None, n=3, seed=2):
        for cut in (text, text[: len(text) // 2]):
            _agree(grammar, compiled, cut)


def test_the_tree_is_the_authors_derivation():
    grammar = EarleyGrammar(parse_ebnf(ROBOT))
    result = grammar.parse("go 12; turn left")
    assert result.accepted and result.ambiguity is None
    assert result.tree.bracketed("go 12; turn left") == (
        "root[command[go ws[ ] number[1 2]] ; ws[ ] command[turn ws[ ] turn[left]]]"
    )
    turn = next(n for n in result.tree.walk() if n.label == "turn")
    assert (turn.start, turn.end, turn.complete) == (12, 16, True)
    literal = turn.children[0]
    assert (literal.label, literal.kind, literal.text("go 12; turn left")) == ('"left"', "literal", "left")
    assert ROBOT[literal.source[0] : literal.source[1]] == '"left"'  # where it is written
    assert result.tree.source[0] == 0 and turn.source == parse_ebnf(ROBOT).rules["turn"].span


def test_a_rejected_sample_gets_its_partial_tree_and_the_expected_literals():
    grammar = EarleyGrammar(parse_ebnf(ROBOT))
    result = grammar.parse("turn up")
    assert result.kind == "rejected" and result.position == 5 and result.line_column == (1, 6)
    assert describe_expected(result.expected) == (
        'expected [ \\t] (rule ws, line 5) or "left" or "right" (rule turn, line 3)'
    )  # more blanks, or a turn
    assert {(e.text, e.rule, e.line) for e in result.expected} == {
        ("[ \\t]", "ws", 5),
        ('"left"', "turn", 3),
        ('"right"', "turn", 3),
    }
    # the derivation as far as it got: root > command > turn, all three left open
    assert result.tree.bracketed("turn up") == "root[command[turn ws[ ] turn[ …] …] …]"
    assert [n.label for n in result.tree.walk() if n.kind == "rule" and not n.complete] == ["root", "command", "turn"]
    # inside a literal: how much of it matched
    half = grammar.parse("turn lex")
    assert describe_expected(half.expected) == "expected \"left\" (after 'le') (rule turn, line 3)"
    leaf = next(n for n in half.tree.walk() if n.kind == "literal" and n.label == '"left"')
    assert not leaf.complete and leaf.text("turn lex") == "le"


def test_a_valid_prefix_says_what_may_come_and_whether_it_may_end():
    grammar = EarleyGrammar(parse_ebnf(ROBOT))
    prefix = grammar.parse("go")
    assert prefix.kind == "prefix" and not prefix.can_end
    assert describe_expected(prefix.expected, can_end=prefix.can_end) == (
        "expected [ \\t] (rule ws, line 5) or [0-9] (rule number, line 4)"
    )
    done = grammar.parse("go 1")
    assert done.accepted and done.can_end
    assert describe_expected(done.expected, can_end=True).endswith("or the end of the input")


def test_two_derivations_of_one_sample_are_flagged():
    text = 'root ::= word (" " word)*\nword ::= keyword | name\nkeyword ::= "if" | "then"\nname ::= [a-z]+\n'
    result = parse_sample(parse_ebnf(text), "if x")
    assert result.accepted and result.ambiguity is not None
    a = result.ambiguity
    assert a.rule == "word" and (a.start, a.end) == (0, 2)
    assert {a.first.bracketed("if x"), a.second.bracketed("if x")} == {"word[keyword[if]]", "word[name[i f]]"}
    assert "ambiguous: rule word matches 'if' in two ways" in a.describe("if x")
    assert parse_sample(parse_ebnf(text), "x y").ambiguity is None
    # two nullable separators in a row split a space two ways
    spaces = parse_sample(parse_ebnf('root ::= "a" ws ws "b"\nws ::= [ ]*\n'), "a  b")
    assert spaces.accepted and spaces.ambiguity is not None


@pytest.mark.parametrize(
    "rule, good, bad",
    [
        ('root ::= "a"{2,3}', ["aa", "aaa"], ["a", "aaaa"]),
        ('root ::= ("a" | "")*', ["", "aaa"], ["b"]),
        ('root ::= ("x"?){2}', ["", "x", "xx"], ["xxx"]),
        ('root ::= [a-c]{0,40} "."', ["abc.", "."], ["abcd."]),
        ('root ::= ("ab")+ "c"?', ["ab", "ababc"], ["a", "abca"]),
        ('root ::= "é" [α-ω]+', ["éαβ"], ["é", "ea"]),
    ],
)
def test_repetitions_without_unrolling(rule, good, bad):
    ast = parse_ebnf(rule + "\n")
    compiled = compile_grammar(rule + "\n")
    grammar = EarleyGrammar(ast)
    for text in good:
        assert grammar.parse(text).accepted, text
        _agree(grammar, compiled, text)
    for text in bad:
        assert not grammar.parse(text).accepted, text
        _agree(grammar, compiled, text)


def test_a_huge_bound_costs_what_the_sample_needs():
    grammar = EarleyGrammar(parse_ebnf("root ::= [a-z]{0,2147483647}\n"))
    result = grammar.parse("abc" * 100)
    assert result.accepted and result.items < 3_000


def test_left_recursion_and_empty_rules():
    text = 'root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9] | ""\n'
    grammar = EarleyGrammar(parse_ebnf(text))
    result = grammar.parse("1+2+")
    assert result.accepted
    assert result.tree.bracketed("1+2+") == "root[expr[expr[expr[term[1]] + term[2]] + term[]]]"


def test_the_budget_is_a_clear_error():
    grammar = EarleyGrammar(parse_ebnf('root ::= ws ws ws ws "x"\nws ::= [ ]*\n'))
    with pytest.raises(ParseLimitError, match="needs more than 500 Earley items"):
        grammar.parse(" " * 200 + "x", max_items=500)


def test_patterns_and_tag_dispatch_are_parsed_byte_by_byte():
    """A JSON Schema's pattern (XGrammar's Regex automaton) and a TagDispatch: the automaton is
    one node, what it dispatches to stays inside, and a stop inside the pattern names it."""
    import json

    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"}},
        "required": ["id"],
    }
    compiled = compile_grammar(json.dumps(schema), kind="json_schema")
    grammar = EarleyGrammar(compiled.ast)
    good = '{"id": "AB-1234"}'
    result = grammar.parse(good)
    assert result.accepted
    (pattern,) = [n for n in result.tree.walk() if n.kind == "pattern"]
    assert pattern.text(good) == "AB-1234" and pattern.label.startswith('Regex("^[A-Z]{2}-[0-9]{4}$"')
    bad = '{"id": "AB-12x"}'
    stop = grammar.parse(bad)
    assert stop.kind == "rejected" and stop.position == bad.index("x")
    assert [e.kind for e in stop.expected] == ["pattern"]
    for text in (good, bad, '{"id": "AB', '{"id": "é"}'):
        _agree(grammar, compiled, text)
    tags = 'root ::= TagDispatch(("<a>", ra), ("<b>", rb))\nra ::= "1" "</a>"\nrb ::= "2" "</b>"\n'
    compiled = compile_grammar(tags)
    grammar = EarleyGrammar(compiled.ast)
    result = grammar.parse("x<a>1</a>y")
    assert result.accepted and [n.label for n in result.tree.walk() if n.kind == "rule"] == ["root", "ra"]
    stop = grammar.parse("x<b>3")
    assert stop.kind == "rejected" and describe_expected(stop.expected) == 'expected "2" (rule rb, line 3)'
    for text in ("x<a>1</a>y", "x<b>3", "<a>1", "plain text"):
        _agree(grammar, compiled, text)


def test_utf8_positions_are_the_gnfs_to_the_byte():
    grammar_text = 'root ::= "é" [α-ω]+ "."\n'
    compiled = compile_grammar(grammar_text)
    grammar = EarleyGrammar(compiled.ast)
    for text in ("éαβ.", "éαβx", "éa", "é", "éαβ.ω"):
        _agree(grammar, compiled, text)
    result = grammar.parse("éαβ.")
    leaves = [(n.label, n.text("éαβ.")) for n in result.tree.walk() if n.kind != "rule"]
    assert leaves == [('"é"', "é"), ("[α-ω]", "α"), ("[α-ω]", "β"), ('"."', ".")]


def test_memory_is_bounded_on_a_very_ambiguous_sample():
    """Items and back links share the budget: four nullable separators over 5,000 spaces stop
    at it (measured +73 MB, 1 s) instead of growing links without end."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    grammar = EarleyGrammar(parse_ebnf('root ::= ws ws ws ws "x"\nws ::= [ ]*\n'))
    with pytest.raises(ParseLimitError):
        grammar.parse(" " * 5000 + "x")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 400, grown_mb
