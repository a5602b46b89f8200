"""Lowering matches XGrammar's byte semantics exactly, boundary code points and bad UTF-8 included."""

from __future__ import annotations

import pytest
from grammar_tools import xgrammar_matcher, xgrammar_matches

from cfgzip_lab.grammar.lower import MAX_CODE_POINT, utf8_sequences
from cfgzip_lab.pipeline import compile_grammar

BOUNDARIES = [0x0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]
INVALID = [
    b"\x80",
    b"\xbf",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xe0\x9f\xbf",
    b"\xf0\x80\x80\x80",
    b"\xf0\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\xfe",
    b"\xc2",
    b"\xe0\xa0",
    b"\xed\xa0\x80",
    b"\xc2\x41",
]

CLASSES = [
    "[^a]",
    "[\\u0080-\\u07FF]",
    "[\\u07F0-\\u0810]",
    "[\\uD7F0-\\uE010]",
    "[\\uFFF0-\\U00010010]",
    "[^\\u0000-\\u007F]",
    "[\\U0010FFF0-\\U0010FFFF]",
    "[\\x00-\\x7f]",
]


def encodings() -> list[bytes]:
    out = []
    for cp in BOUNDARIES:
        for d in (-1, 0, 1):
            if 0 <= cp + d <= MAX_CODE_POINT:
                out.append(chr(cp + d).encode("utf-8", "surrogatepass"))
    return out + INVALID


@pytest.mark.parametrize("cls", CLASSES)
def test_class_bytes_match_xgrammar(cls: str) -> None:
    text = f"root ::= {cls}\n"
    gnf = compile_grammar(text).gnf
    matcher = xgrammar_matcher(text)
    for data in encodings():
        matcher.reset()
        xg_prefix = matcher.accept_string(data)
        xg_full = xg_prefix and matcher.is_terminated()
        assert (gnf.accepts(data, prefix=True), gnf.accepts(data)) == (xg_prefix, xg_full), (cls, data)


def test_utf8_sequences_cover_exactly_the_range() -> None:
    for lo, hi in [(0, MAX_CODE_POINT), (0x70, 0x900), (0x7F0, 0x810), (0xFFF0, 0x10010)]:
        seqs = utf8_sequences(lo, hi)
        covered = 0
        for seq in seqs:
            n = 1
            for a, b in seq:
                n *= b - a + 1
            covered += n
        assert covered == hi - lo + 1
        for cp in {lo, hi, (lo + hi) // 2}:
            data = chr(cp).encode("utf-8", "surrogatepass")
            assert any(len(s) == len(data) and all(a <= x <= b for x, (a, b) in zip(data, s)) for s in seqs)


def test_literal_escapes_are_code_points() -> None:
    gnf = compile_grammar('root ::= "\\xff" "\\u00e9" "\\U0001F600"\n').gnf
    assert gnf.accepts("ÿé😀".encode())
    assert not gnf.accepts(b"\xff\xc3\xa9\xf0\x9f\x98\x80")


def test_an_automaton_lowers_to_one_right_linear_nonterminal_per_state():
    """tree.Automaton (a Regex): Q -> bytes Q' per edge (ranges between the same two states share one
    production), Q -> ε per final state, a sub-expression edge as its symbols then Q'."""
    from grammar_tools import earley_accepts

    from cfgzip_lab.grammar.lower import lower
    from cfgzip_lab.grammar.tree import Automaton, GrammarAST, Literal, Rule, Sequence

    inner = Automaton(2, 0, (1,), ((0, (0x78, 0x78), 1),))  # "x"
    # 0 -[ab]-> 1 -c-> 1 (final), 1 -"x"-> 2 (final); [ab] given as two ranges
    automaton = Automaton(
        3, 0, (1, 2), ((0, (0x61, 0x61), 1), (0, (0x62, 0x62), 1), (1, (0x63, 0x63), 1), (1, inner, 2))
    )
    cfg = lower(GrammarAST({"root": Rule("root", Sequence((Literal("<"), automaton, Literal(">"))))}))
    states = [name for name, origin in cfg.origins.items() if origin.kind == "regex"]
    assert len(states) == 3 + 2
    start = cfg.rules["root"][0][1]
    assert len(cfg.rules[start]) == 1, "[ab] is one production"
    for data, expected in [(b"<a>", True), (b"<bccx>", True), (b"<ax>", True), (b"<>", False), (b"<axc>", False)]:
        assert earley_accepts(cfg, data) == expected, data


def _lowered(cfg) -> tuple:
    """Everything the lowering leaves, dict order included."""
    return (
        list(cfg.rules.items()),
        list(cfg.origins.items()),
        list(cfg.symbol_spans.items()),
        list(cfg.counted.items()),
        cfg.tokens,
        cfg.start,
        cfg.text,
    )


def test_kept_prefix_lowers_alike():
    """A grammar started from the kept lowering of a prefix it shares with other grammars (XGrammar's
    basic_* rules at the top of every JSON Schema's EBNF) lowers exactly as from scratch: the same
    nonterminals, productions, origins, spans and their order, on schemas, repeats, grammars sharing
    most of their rules, a class first made in the prefix, counted repetitions and other thresholds. The
    rules' kept lowerings (lower._LOWERED, a grammar lowered again) are dropped for the reference too."""
    from paths import CORPORA

    import cfgzip_lab.grammar.lower as lowering
    from cfgzip_lab.grammar.ebnf import parse_ebnf
    from cfgzip_lab.grammar.sources import to_ebnf

    suite = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("*.json") if ".instance" not in p.name)
    texts = []
    for path in suite[::25]:
        try:
            texts.append(to_ebnf(path.read_text(encoding="utf-8"), "json_schema").ebnf)
        except Exception:  # schemas XGrammar refuses
            continue
    head = 'a ::= [^"\\\\] b\nb ::= "x" | [^"\\\\] a\nc ::= [0-9]{1,3000}\nd ::= [ \\t]* c\ne ::= d{2,5}\n'
    texts += [head + "root ::= a e\n", head + 'root ::= e a [^"\\\\]\n', head + 'root ::= a e\nf ::= "q"\n']
    texts += [texts[0], texts[1], texts[0]]
    used = 0
    for threshold in (lowering.COUNTED_THRESHOLD, 2):
        for text in texts:
            ast = parse_ebnf(text)
            got = lowering.lower(ast, counted_threshold=threshold)
            used += lowering._kept_prefix(list(ast.rules.values()), (threshold, frozenset())) is not None
            kept, last, rules = list(lowering._PREFIXES), dict(lowering._LAST), dict(lowering._LOWERED)
            lowering._PREFIXES.clear()
            lowering._LAST.clear()
            lowering._LOWERED.clear()
            try:
                want = lowering.lower(ast, counted_threshold=threshold)
            finally:
                lowering._PREFIXES[:] = kept
                lowering._LAST.clear()
                lowering._LAST.update(last)
                lowering._LOWERED.clear()
                lowering._LOWERED.update(rules)
            assert _lowered(got) == _lowered(want), text[:200]
    assert used > len(texts)  # the kept prefixes were used
    assert lowering._LOWERED  # and the kept rules


def test_equal_regexes_lower_once():
    """A JSON Schema repeats a property's pattern as one Regex(...) per property: equal automata lower
    to one set of state nonterminals (their spans aside); another pattern gets its own."""
    from cfgzip_lab.grammar.ebnf import parse_ebnf
    from cfgzip_lab.grammar.lower import lower

    text = (
        'root ::= "<" a "," b "," c ">"\n'
        'a ::= Regex("(x[0-9]+ ){0,20}y")\nb ::= Regex("(x[0-9]+ ){0,20}y")\nc ::= Regex("(x[0-9]+ ){0,21}y")\n'
    )
    cfg = lower(parse_ebnf(text))
    starts = {name: cfg.rules[name][0][0] for name in "abc"}
    assert starts["a"] == starts["b"] != starts["c"]
    regex_states = [n for n, o in cfg.origins.items() if o.kind == "regex"]
    assert {cfg.origins[s].rule for s in regex_states} == {"a", "c"}  # b made none of its own
    grammar = compile_grammar(text)
    matcher = xgrammar_matcher(text)
    for doc in ("<y,x1 y,x1 x22 y>", "<y,y,y>", "<x y,y,y>", "<y,y>", "<" + "x1 " * 20 + "y,y," + "x1 " * 21 + "y>"):
        assert grammar.gnf.accepts(doc.encode()) == xgrammar_matches(matcher, doc.encode()), doc
    assert grammar.gnf.accepts(b"<y," + b"x1 " * 20 + b"y,y>") and not grammar.gnf.accepts(
        b"<y," + b"x1 " * 21 + b"y,y>"
    )
