"""Provenance: every byte-CFG and GNF nonterminal maps back to the source rule, construct and line."""

from __future__ import annotations

import pytest

from cfgzip_lab.grammar.provenance import describe_origin, rule_sizes
from cfgzip_lab.pipeline import compile_grammar
from tests.paths import BUNDLED, grammar_id

EXPR = """root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= [0-9]+ | "(" expr ")"
"""

LEFT = """root ::= sum
sum ::= sum "+" num | num
num ::= [0-9] [0-9]?
"""


def test_helpers_name_their_construct_and_line():
    g = compile_grammar(EXPR)
    cfg = g.cfg
    kinds = {name: cfg.origins[name].kind for name in cfg.rules}
    assert kinds["expr"] == "rule" and cfg.origins["expr"].line == 2
    loops = [n for n in cfg.rules if n.startswith("expr@") and kinds[n] == "repetition"]
    assert len(loops) == 1
    assert cfg.describe_symbol(loops[0]) == 'the repetition (("+" | "-") term)* in rule expr (line 2)'
    choice = next(n for n in cfg.rules if n.startswith("expr@") and kinds[n] == "alternation")
    assert cfg.origins[choice].excerpt == '("+" | "-")' and cfg.origins[choice].column == 16
    assert "factor@" in next(n for n in cfg.rules if kinds[n] == "repetition" and cfg.origins[n].rule == "factor")
    assert cfg.describe_symbol("root") == "rule root (line 1)"
    with pytest.raises(KeyError, match="not a nonterminal"):
        cfg.describe_symbol("nope@1")


def test_optional_and_bounded_repetition_kinds():
    g = compile_grammar('root ::= "a"? "b"{1,3}\n')
    kinds = sorted(o.kind for n, o in g.cfg.origins.items() if n != "root")
    assert kinds == ["bounded repetition", "bounded repetition", "optional"]


def test_gnf_terminals_point_at_their_occurrence():
    g = compile_grammar(EXPR)
    gnf = g.gnf
    plus = [i for i, n in enumerate(gnf.names) if n == "'+'"]
    star = [i for i, n in enumerate(gnf.names) if n == "'*'"]
    # the '+' is read first by a lifted terminal only if it is a tail symbol; where it is, it says so
    for i in plus + star:
        (origin,) = gnf.origins[i]
        assert origin.kind == "terminal" and origin.rule in ("expr", "term")
    start = gnf.start
    assert gnf.describe_symbol(start) == "the whole grammar (rule root)"
    assert set(gnf.rules_of(start)) == {"root"}


def test_left_recursion_tail_maps_to_its_rule():
    g = compile_grammar(LEFT)
    gnf = g.gnf
    tails = [i for i in range(gnf.num_nonterminals) if any(o.kind == "left recursion" for o in gnf.origins[i])]
    assert tails, gnf.names
    assert all(gnf.rules_of(i) == ("sum",) for i in tails)
    assert "left-recursive rule sum (line 2)" in gnf.describe_symbol(tails[0])


def test_merged_terminals_keep_every_origin():
    text = 'root ::= "true" | "false"\n'
    gnf = compile_grammar(text).gnf
    merged = [i for i in range(gnf.num_nonterminals) if len(gnf.origins[i]) > 1]
    assert merged, [gnf.merged_from[i] for i in range(gnf.num_nonterminals)]
    described = gnf.describe_symbol(merged[0])
    assert '"true"' in described and '"false"' in described and " and " in described


def test_gnf_names_are_not_unique_so_ids_are_asked_for():
    gnf = compile_grammar('root ::= "aaa"\n').gnf
    with pytest.raises(KeyError, match="pass the id"):
        gnf.describe_symbol("'a'")
    with pytest.raises(KeyError, match="does not exist"):
        gnf.describe_symbol(999)


@pytest.mark.parametrize("path", BUNDLED, ids=[grammar_id(p) for p in BUNDLED])
def test_every_nonterminal_has_a_source_rule(path):
    g = compile_grammar(path.read_text(encoding="utf-8"))
    rules = set(g.ast.rules)
    assert set(g.cfg.origins) == set(g.cfg.rules)
    assert all(o.rule in rules for o in g.cfg.origins.values())
    # the line of a helper is within its rule's lines
    for name, origin in g.cfg.origins.items():
        own = g.cfg.origins[origin.rule]
        assert origin.line is not None and own.line is not None and origin.line >= own.line, name
    assert len(g.gnf.origins) == g.gnf.num_nonterminals == len(g.gnf.merged_from)
    for i in range(g.gnf.num_nonterminals):
        assert g.gnf.origins[i] and set(g.gnf.rules_of(i)) <= rules
        assert "rule " in g.gnf.describe_symbol(i)


def test_rule_sizes_add_up_and_name_the_growth():
    g = compile_grammar(EXPR)
    sizes = rule_sizes(g.cfg, g.gnf)
    assert {s.rule for s in sizes} == set(g.ast.rules)
    assert sum(s.cfg_productions for s in sizes) == g.cfg.num_productions
    assert sum(s.cfg_nonterminals for s in sizes) == len(g.cfg.rules)
    assert sizes == sorted(sizes, key=lambda s: -s.gnf_productions)
    assert sum(s.gnf_productions for s in sizes) >= g.gnf.num_productions - int(g.gnf.accepts_empty)
    assert all(s.line is not None for s in sizes)


def test_describe_origin_phrases():
    g = compile_grammar(EXPR)
    assert describe_origin(g.cfg.origins["term"]) == "rule term (line 3)"
