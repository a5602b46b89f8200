"""A root rule used inside its grammar: XGrammar's masks leave the language there, so the native
engine serves such a grammar through the compressed engine (XGrammar over the representatives), and
walks natively where nothing can follow the nested root (:mod:`cfgzip_lab.grammar.nested_root`).

Found by MaskBench (Github_easy o58637, ``"$ref": "#"``): after ``{"children": [{"children": []``
XGrammar's mask left out ``},`` and ``}\\n`` where cfgzip allowed them (8 of 520,085 steps of a
2,000-file run differed), while XGrammar's own ``accept_string("},")`` succeeds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgrammar as xgr

import cfgzip_lab as cz
from cfgzip_lab.engine import compile_engines, plain_tokenizer_info
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.nested_root import nested_root_reference
from cfgzip_lab.native import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_engines
from cfgzip_lab.vocab import vocab_from_bytes

TOKENS = [
    b"(",
    b")",
    b"))",
    b")))",
    b"x",
    b"x)",
    b"a",
    b"b",
    b"ab",
    b"bb",
    b"ba",
    b"b))",
    b"[",
    b"]",
    b"]]",
    b"],",
    b",",
    b"",
]
VOCAB = vocab_from_bytes(TOKENS, stop_ids=[len(TOKENS) - 1], name="nested-root", vocab_size=len(TOKENS))

# grammar__line__column__refused: where a nested root can be followed by more input, the first such reference
grammar__line__column = [
    ('root ::= "(" root ")" | "x"', 1, 14),
    ('root ::= "(" r ")" | "x"\nr ::= root', 2, 7),
    ('root ::= "" | root [b]', 1, 15),
    ('root ::= ("a" root)* "b"', 1, 15),
    ('root ::= "[" a "]" | "x"\na ::= root ("," root)*', 2, 7),
    ('root ::= "a" r\nr ::= root "b" | "x"', 2, 7),
    ('root ::= "a" r | "x"\nr ::= q\nq ::= root ("b" | "")', 3, 7),
]

# grammars whose nested roots always end where the outer root does (or with no nested root): served
SERVED = [
    'root ::= "a" root | "b"',
    'root ::= "a" r | "b"\nr ::= root',
    'root ::= "a" root?',
    'root ::= "a" (root | "b") ""',
    'root ::= "a" r | "b"\nr ::= q ""\nq ::= root',
    'root ::= "(" e ")" | "x"\ne ::= "(" e ")" | "x"',
    'root ::= "x" ("(" "root" ")")*',
]


def _mask_and_accept(text: str, prefix: str, token: bytes) -> tuple[bool, bool]:
    """XGrammar's mask bit for ``token`` after ``prefix``, and whether its matcher accepts it there."""
    compiled = compile_engines(text, VOCAB).plain_grammar
    matcher = xgr.GrammarMatcher(compiled)
    assert matcher.accept_string(prefix)
    bitmask = xgr.allocate_token_bitmask(1, VOCAB.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")
    other = xgr.GrammarMatcher(compiled)
    other.accept_string(prefix)
    return bool(bits[TOKENS.index(token)]), bool(other.accept_string(token.decode()))


@pytest.mark.parametrize(
    "text, prefix, token",
    [
        ('root ::= "(" root ")" | "x"', "((x", b"))"),
        ('root ::= "(" r ")" | "x"\nr ::= root', "((x", b"))"),
        ('root ::= "[" a "]" | "x"\na ::= root ("," root)*', "[[x", b"],"),
        ('root ::= "" | root [b]', "b", b"bb"),
    ],
)
def test_premise_xgrammars_mask_leaves_out_what_its_matcher_takes_after_a_nested_root(text, prefix, token):
    """What the refusal rests on, read from the installed XGrammar: a token that the nested root's
    own body begins and that runs past its end is out of the mask, though ``accept_string`` takes
    it. If a release changes this, this test says so, and the refusal can be lifted for it."""
    assert _mask_and_accept(text, prefix, token) == (False, True)


def test_premise_a_token_begun_in_another_rule_may_run_past_the_nested_root():
    """Only tokens the root's own body begins are left out: after ``((a`` the token ``b))`` is begun by
    rule ``w`` (uncertain there, checked against the whole stack) and is in XGrammar's mask; after
    ``((ab``, ``))`` is begun by the nested root's ``")"`` and is not."""
    text = 'root ::= "(" root ")" | w\nw ::= "a" "b"?'
    assert _mask_and_accept(text, "((a", b"b))") == (True, True)
    assert _mask_and_accept(text, "((ab", b"))") == (False, True)


def _engines(text: str):
    compiled = compile_grammar(text)
    classes = build_classes(compiled, VOCAB).classes
    engines = compile_engines(text, VOCAB, classes)
    return engines, build_native_engine(compiled, VOCAB, classes, xgrammar_engines=engines)


def _assert_xgrammars_masks(engines, native, compressed: bool = True) -> None:
    """Random walks, every step's mask and accept XGrammar's (no mismatch). Where the compressed engine
    is refused (a nested root) XGrammar's own matcher takes tokens its mask leaves out: counted as
    XGrammar disagreements, never as mismatches."""
    for candidate, name in ((native.matcher, "native"), (None, "compressed"))[: 2 if compressed else 1]:
        report = verify_engines(
            engines,
            candidate=candidate,
            candidate_name=name,
            walks=25,
            steps=8,
            seed=1,
            allow_xgrammar_disagreements=not compressed,
        )
        assert report.ok and report.mismatches == 0 and report.steps_checked > 0, (name, report.first_mismatch)
        assert compressed is False or report.xgrammar_disagreements == 0


@pytest.mark.parametrize("text, line, column", grammar__line__column, ids=[g for g, *_ in grammar__line__column])
def test_a_root_nested_with_input_after_it_is_served_by_xgrammar_itself(text, line, column):
    """Found at the reference (line and column); the native engine takes no σ_in index, says why,
    and every request goes to XGrammar over the whole vocabulary: its masks, quirk included. The
    compressed engine is refused there, at the reference."""
    found = nested_root_reference(parse_ebnf(text))
    assert found is not None and (found.line, found.column) == (line, column), found
    assert "XGrammar's mask leaves out every token" in found.message
    engines, native = _engines(text)
    assert native.index is None and native.unavailable.startswith(f"line {line}, column {column}: the root rule")
    _assert_xgrammars_masks(engines, native, compressed=False)
    assert native.fallbacks > 0
    matcher = cz.matcher_for(text, VOCAB, cache=cz.GrammarCache(cache_dir=False))
    assert matcher.engine.index is None and "XGrammar itself over the whole vocabulary" in matcher.engine.unavailable
    with pytest.raises(GrammarError, match=rf"{line}:{column}: error: .*the compressed engine refuses this grammar"):
        engines.compressed()


@pytest.mark.parametrize("text", SERVED)
def test_a_root_that_ends_with_the_outer_one_is_walked_natively_and_exact(text):
    """No nested root with input after it: the native walk serves (an index, no fallback), and
    every step of random walks has XGrammar's mask, so the exemption is not a guess."""
    assert nested_root_reference(parse_ebnf(text)) is None
    engines, native = _engines(text)
    assert native.index is not None and native.unavailable is None
    _assert_xgrammars_masks(engines, native)
    assert native.fallbacks == 0


def test_the_native_walk_would_follow_the_language_there(monkeypatch):
    """Why the grammar goes to the compressed engine: with the check turned off, the native walk allows
    ``))`` after ``((x`` (the language's answer), where XGrammar's mask does not."""
    import cfgzip_lab.pipeline

    monkeypatch.setattr(cfgzip_lab.pipeline, "nested_root_reason", lambda compiled: None)
    engines, native = _engines('root ::= "(" root ")" | "x"')
    assert native.index is not None
    matcher = native.matcher()
    for token in (b"(", b"(", b"x"):
        assert matcher.accept_token(TOKENS.index(token))
    bitmask = matcher.allocate_bitmask(1)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")
    assert bits[TOKENS.index(b"))")]
    report = verify_engines(engines, candidate=native.matcher, candidate_name="native", walks=25, steps=8, seed=1)
    assert not report.ok


RECURSIVE_SCHEMA = {  # MaskBench Github_easy o58637
    "type": "object",
    "properties": {
        "node": {"type": "object", "properties": {"info": {"type": "string"}}},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
}


@pytest.fixture(scope="module")
def llama3():
    return cz.load_vocab("llama3")


def test_maskbench_o58637_keeps_xgrammars_masks_where_they_leave_the_language(llama3):
    schema = json.dumps(RECURSIVE_SCHEMA)
    compiler = xgr.GrammarCompiler(plain_tokenizer_info(llama3), cache_enabled=False)
    compiled = compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=True)
    prefix = '{"children": [{"children": []'
    matcher = xgr.GrammarMatcher(compiled)
    assert matcher.accept_string(prefix)
    bitmask = xgr.allocate_token_bitmask(1, llama3.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")
    comma = [bytes(b) for b in llama3.token_bytes].index(b"},")
    assert not bits[comma] and matcher.accept_string("},")  # the premise on the real input
    ours = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert ours.engine.index is None and "(in the EBNF XGrammar wrote for the json_schema)" in ours.engine.unavailable
    for token in llama3.encoder(prefix):
        assert ours.accept_token(token)
    words = ours.allocate_bitmask(1)
    ours.fill_next_token_bitmask(words)
    assert np.array_equal(words.numpy()[0], bitmask.numpy()[0])


def test_the_advised_rewrite_of_a_recursive_schema_is_served(llama3):
    """The message's advice: the recursive part as a definition of its own, the root referring to it:
    walked natively (an index), and the token XGrammar's root mask left out is allowed by both."""
    node = {
        "type": "object",
        "properties": {
            "node": {"type": "object", "properties": {"info": {"type": "string"}}},
            "children": {"type": "array", "items": {"$ref": "#/$defs/tree"}},
        },
    }
    schema = json.dumps({"$defs": {"tree": node}, "$ref": "#/$defs/tree"})
    matcher = cz.matcher_for(schema, llama3, kind="json_schema", cache=cz.GrammarCache(cache_dir=False))
    assert matcher.engine.index is not None and matcher.engine.unavailable is None
    assert all(matcher.accept_token(t) for t in llama3.encoder('{"children": [{"children": []},'))


def test_the_name_count_counts_as_its_scan_does():
    """nested_root._name_count (a regex per name) against _name_count_scan, its reference: on schema grammars
    (their root's name, a basic rule's, a part's) and on neighbours each side (Unicode letters and digits, _ . -,
    the text's ends, overlapping candidates)."""
    import gzip
    import random

    from paths import MASKBENCH

    from cfgzip_lab.grammar.nested_root import _name_count, _name_count_scan
    from cfgzip_lab.grammar.sources import to_ebnf

    texts = [
        "root",
        "root root",
        "xroot root_ root. .root -root root-",
        "éroot rootñ ٣root root² (root) root{1, 2}",
        "aaa aa aa",
        "root\nroot ::= (root)\n",
        "",
    ]
    if MASKBENCH.exists():
        with gzip.open(MASKBENCH, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        for row in random.Random(9).sample(rows, 40):
            try:
                texts.append(to_ebnf(json.dumps(row["schema"]), "json_schema").ebnf)
            except GrammarError:
                continue
    for text in texts:
        for name in ("root", "aa", "root_prop_0", "basic_string", "a.b", "x-y", "r", "é"):
            for limit in (0, 1, 2, 5):
                assert _name_count(text, name, limit) == _name_count_scan(text, name, limit), (text[:80], name)
