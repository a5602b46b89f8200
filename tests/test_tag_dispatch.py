"""TagDispatch: free text, tags and excludes exactly as xgrammar 0.2.8 matches them.

Every row is asked of XGrammar's own matcher (prefix and full acceptance of raw bytes) and of
cfgzip's GNF; a seeded random sweep over small tag and exclude sets does the same for every
string up to a length. Verification runs walks that type the tags (``guides``).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from grammar_tools import xgrammar_matcher
from paths import CORPORA

from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.tag_dispatch import build_states, dispatch_triggers
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

CORPUS = CORPORA / "xgrammar-tests"


def xgrammar_says(matcher, data: bytes) -> tuple[bool, bool]:
    """(whole string accepted, prefix of an accepted string) by XGrammar's matcher."""
    matcher.reset()
    if not matcher.accept_string(data):
        return False, False
    return matcher.is_terminated(), True


def gnf_says(compiled, data: bytes) -> tuple[bool, bool]:
    return compiled.gnf.accepts(data), compiled.gnf.accepts(data, prefix=True)


# grammar, strings, what each string is (F: full, P: prefix only, N: neither) — as 0.2.8 says
grammar__strings__kinds = [
    # free text until a tag, the tag's rule, free text again; any bytes are free text
    (
        'root ::= TagDispatch(("<a>", x))\nx ::= "b"',
        [b"", b"hi", b"hi<a>b", b"hi<a>", b"hi<a>c", b"<a>b<a>b", b"\xff\x80", b"<a"],
        "FFFPNFFF",
    ),
    # without looping: free text, or free text, a tag and its rule, then nothing
    ('root ::= TagDispatch(("<a>", x), loop_after_dispatch=false)\nx ::= "b"', [b"hi", b"hi<a>b", b"hi<a>bc"], "FFN"),
    # it may end in free text, then what follows it goes on (an exclude may straddle that end)
    ('root ::= TagDispatch(excludes=("ab")) "b"', [b"ab", b"aab", b"abb", b"b"], "FFNF"),
    # failure links: "aab" is found inside "aaab"
    ('root ::= TagDispatch(("aab", x))\nx ::= "X"', [b"aaab", b"aaabX", b"abaabX"], "PFF"),
    # a tag that is a prefix of another: either may follow
    ('root ::= TagDispatch(("<a", x), ("<ab", y))\nx ::= "X"\ny ::= "Y"', [b"<aX", b"<abY", b"<abX", b"<ac"], "FFNN"),
    # a tag that is only a suffix of the state's string is not seen
    ('root ::= TagDispatch(("xa", p), ("a", q))\np ::= "P"\nq ::= "Q"', [b"xaP", b"xaQ", b"aQ"], "FNF"),
    # an exclude that ends a tag kills the tag (0.2.8; XGrammar's newer source differs)
    ('root ::= TagDispatch(("ab", q), excludes=("b"))\nq ::= "Q"', [b"abQ", b"aQ", b"ab"], "NFN"),
    ('root ::= TagDispatch(("b", q), excludes=("ab"))\nq ::= "Q"', [b"abQ", b"cbQ"], "NF"),
    # tags are UTF-8 of the string's code points ("\\xff" is U+00FF)
    (
        'root ::= TagDispatch(("\\xff", x), ("é", x))\nx ::= "P"',
        [b"\xffP", b"\xc3\xbfP", b"\xc3\xa9P", b"\xc3"],
        "FFFF",
    ),
    # in a sequence, a choice, a repetition
    (
        'root ::= "a" TagDispatch(("t", b), loop_after_dispatch=false) "z"\nb ::= "B"',
        [b"az", b"axtBz", b"atBtBz"],
        "FFN",
    ),
    ('root ::= (TagDispatch(("t", b)) | "zz")\nb ::= "B"', [b"zz", b"tB", b"tz"], "FFN"),
]


@pytest.mark.parametrize("grammar, strings, kinds", grammar__strings__kinds)
def test_tag_dispatch_language(grammar: str, strings: list[bytes], kinds: str) -> None:
    compiled = compile_grammar(grammar)
    matcher = xgrammar_matcher(grammar)
    expected = {"F": (True, True), "P": (False, True), "N": (False, False)}
    for data, kind in zip(strings, kinds, strict=True):
        assert xgrammar_says(matcher, data) == expected[kind], (data, "xgrammar")
        assert gnf_says(compiled, data) == expected[kind], (data, "gnf")


def _random_case(rng: random.Random, alphabet: bytes) -> str:
    def word() -> bytes:
        return bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))

    tags = [word() for _ in range(rng.randint(0, 3))]
    excludes = [w for w in (word() for _ in range(rng.randint(0, 2))) if not any(t.startswith(w) for t in tags)]
    args = [f'("{t.decode()}", r{i})' for i, t in enumerate(tags)]
    if rng.random() < 0.5:
        args.append("loop_after_dispatch=false")
    if excludes:
        args.append("excludes=(" + ", ".join(f'"{e.decode()}"' for e in excludes) + ",)")
    rules = "".join(f'r{i} ::= "{chr(ord("P") + i)}"\n' for i in range(len(tags)))
    return f"root ::= TagDispatch({', '.join(args)})\n{rules}"


def test_random_tags_and_excludes_match_xgrammar() -> None:
    """Seeded: 40 random TagDispatch grammars over {a, b}, every string up to 5 bytes over
    {a, b, P, Q, R}, prefix and full acceptance (by hand: 1,350 grammars, 0 differences)."""
    rng = random.Random(19)
    strings = [bytes(s) for n in range(6) for s in itertools.product(b"abPQR", repeat=n)]
    for _ in range(40):
        grammar = _random_case(rng, b"ab")
        compiled = compile_grammar(grammar)
        matcher = xgrammar_matcher(grammar)
        for data in strings:
            assert gnf_says(compiled, data) == xgrammar_says(matcher, data), (grammar, data)


def test_automaton_is_small() -> None:
    """One state per trie node; the free text's bytes share a few ranges."""
    built = build_states([b"<tool_call>", b"<think>"], [b"</s>"])
    assert len(built.rows) == 1 + len("<tool_call>") + len("hink>") + len("/s>")  # "<t" and "<" shared
    assert built.dispatch == {11: (0,), 16: (1,)}
    assert built.finals == frozenset(range(len(built.rows))) - {11, 16, 19}
    assert all(len(set(row.values())) <= 4 for row in built.rows)
    assert built.step(17, ord("s")) == 18 and built.step(18, ord(">")) is None  # "</s" then ">": excluded
    assert built.defaults[11] is None and built.defaults[0] == built.defaults[5] == 0
    assert built.step(0, ord("<")) == 1 and built.step(5, ord("x")) == 0 and built.step(11, ord("x")) is None


def test_dispatch_triggers_lists_tags_and_excludes() -> None:
    ast = parse_ebnf(
        'root ::= TagDispatch(("<a>", x), ("\\u00e9", x), excludes=("</p>",)) y\n'
        'x ::= TagDispatch(loop_after_dispatch=false)\ny ::= TagDispatch(excludes=("q"))'
    )
    assert dispatch_triggers(ast) == [b"</p>", b"<a>", b"q", b"\xc3\xa9"]


def test_dispatched_rules_are_reachable_references() -> None:
    ast = parse_ebnf('root ::= TagDispatch(("<a>", x))\nx ::= "b" y\ny ::= "c"')
    assert ast.warnings == []


TOOL_GRAMMAR = 'root ::= TagDispatch(("<tool>", call), excludes=("</s>",))\ncall ::= "{" [a-z]+ "}" "</tool>"\n'
TOOL_TOKENS = [
    b"<",
    b">",
    b"<tool>",
    b"tool",
    b"</tool>",
    b"{",
    b"}",
    b"ab",
    b"a",
    b"b",
    b"</",
    b"s",
    b"</s>",
    b" ",
    b"\xc3",
    b"\xa9",
    b"\xff",
    b"hi <",
    b"",
    b"t",
]


@pytest.mark.parametrize("engine", ["compressed", "native"])
def test_verify_with_walks_that_dispatch(engine: str) -> None:
    """Both engines against plain XGrammar on a toy vocabulary; the walks type the tag."""
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.verify import verify_engines

    vocab = vocab_from_bytes(TOOL_TOKENS, stop_ids=[18], vocab_size=24, name="tools")
    compiled = compile_grammar(TOOL_GRAMMAR)
    result = build_classes(compiled, vocab)
    engines = compile_engines(TOOL_GRAMMAR, vocab, result.classes)
    candidate = None
    if engine == "native":
        candidate = build_native_engine(
            compiled, vocab, result.classes, classing=result, xgrammar_engines=engines
        ).matcher
    guides = dispatch_triggers(compiled.ast)
    report = verify_engines(
        engines, walks=40, steps=30, seed=0, guides=guides, candidate=candidate, candidate_name=engine,
        docs=["hi <tool>{ab}</tool> ab <tool>{a}</tool>"],
    )  # fmt: skip
    assert report.ok and report.mismatches == 0, report.first_mismatch
    assert report.guides_typed >= 10 and report.steps_checked > 200 and report.docs_rejected == []


@pytest.fixture(scope="module")
def smollm2():
    from cfgzip_lab.vocab_sources import load_vocab

    return load_vocab("smollm2")


def _corpus_tag_dispatch(n: int, seed: int) -> list[Path]:
    if not CORPUS.is_dir():
        return []
    files = [
        p for p in sorted(CORPUS.glob("*.ebnf")) if "TagDispatch(" in p.read_text() and "Token" not in p.read_text()
    ]
    return sorted(random.Random(seed).sample(files, min(n, len(files))))


@pytest.mark.slow
@pytest.mark.parametrize("path", _corpus_tag_dispatch(3, seed=19), ids=lambda p: p.name)
def test_corpus_tag_dispatch_grammar_verifies(path: Path, smollm2) -> None:
    """A seeded sample of XGrammar's own TagDispatch grammars, compressed engine, SmolLM2."""
    from cfgzip_lab.verify import verify_lossless

    text = path.read_text(encoding="utf-8")
    compiled = compile_grammar(text)
    classes = build_classes(compiled, smollm2).classes
    report = verify_lossless(text, smollm2, classes, walks=6, steps=24, seed=0, guides=dispatch_triggers(compiled.ast))
    assert report.ok and report.mismatches == 0, report.first_mismatch


def test_sampled_sentences_are_accepted_by_xgrammar() -> None:
    """The test sampler walks TagDispatch's automaton (its rule edges included): every sample is
    in XGrammar's language, and so is every random sentence of cfgzip's byte CFG."""
    from grammar_tools import sample, utf8, xgrammar_matches

    from cfgzip_lab.grammar.sentences import generate

    grammar = 'root ::= TagDispatch(("<a>", x), excludes=("zz",)) "!"\nx ::= "b" | "c" y\ny ::= Substring("p", "q")'
    matcher = xgrammar_matcher(grammar)
    ast, rng = parse_ebnf(grammar), random.Random(0)
    for _ in range(30):
        assert xgrammar_matches(matcher, utf8(sample(ast, rng)))
    for sentence in generate(compile_grammar(grammar).cfg, 30, seed=0):
        assert xgrammar_matches(matcher, sentence.data), sentence.data
