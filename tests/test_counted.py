"""Counted repetitions ``X{m,n}``: never unrolled, and exact against real XGrammar near the bounds.

The language checks compare the counted GNF with the unrolled one (the construction every
earlier release used, itself pinned against XGrammar by test_lower/test_gnf); the engine checks
compare the compressed and native masks with plain XGrammar's, bit for bit, on walks and on
documents that fill a repetition exactly to its bound (where a token of k characters is
allowed only while k more fit).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from toy_vocab import JSON_PIECES

from cfgzip_lab.engine import compile_engines
from cfgzip_lab.grammar.counted import COUNTED_THRESHOLD, Family
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.gnf import to_gnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.native import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_engines
from cfgzip_lab.vocab import vocab_from_bytes


def _gnf(text: str, threshold: int):
    return to_gnf(lower(parse_ebnf(text), counted_threshold=threshold))


# -- structure: one object at every stage -------------------------------------------------------
def test_a_large_bound_is_one_counted_nonterminal():
    text = 'root ::= "\\"" [a-z]{0,131072} "\\"" [0-9]{30,}'
    cfg = lower(parse_ebnf(text))
    assert len(cfg.counted) == 2 and len(cfg.rules) < 10
    (string, digits) = sorted(cfg.counted.values(), key=lambda c: c.min)
    assert (string.min, string.max) == (0, 131072) and (digits.min, digits.max) == (30, None)
    gnf = to_gnf(cfg)
    assert gnf.num_nonterminals < 20 and gnf.dag_nodes < 50
    assert [(f.min, f.max) for f in gnf.families] == [(0, 131072), (30, None)]
    assert all(isinstance(f, Family) for f in gnf.families)
    # a member's row is computed, not listed: F_131071 (the last) can only stop
    last = gnf.families[0]
    from cfgzip_lab.grammar.counted import family_symbol

    row = gnf.row(family_symbol(0, last.last))
    assert row and all(gnf.store.count(t) == 1 and gnf.store.accepts(t) for t in row.values())


def test_equal_repetitions_are_one_family():
    """A JSON Schema repeats one string pattern per property (Github_medium o9802: 460 families, 76 of
    them distinct): repetitions of language-equal items with equal bounds merge into one family (the
    first's), others stay apart; without merging each keeps its own."""
    text = (
        'root ::= "{" "\\"" a{0,40} "\\"" "," "\\"" b{0,40} "\\"" "," "\\"" c{0,30} "\\"" "," d{0,40} "}"\n'
        "a ::= [a-z]\nb ::= [a-z]\nc ::= [a-z]\nd ::= [0-9]"
    )
    cfg = lower(parse_ebnf(text))
    assert len(cfg.counted) == 4
    gnf = to_gnf(cfg)
    assert sorted((f.min, f.max) for f in gnf.families) == [(0, 30), (0, 40), (0, 40)]
    assert len({f.item for f in gnf.families if f.max == 40}) == 2  # [a-z] and [0-9]
    merged = [f for f in gnf.families if len(f.origins) > 1]  # the merged family names both repetitions
    assert [[o.excerpt for o in f.origins] for f in merged] == [["a{0,40}", "b{0,40}"]]
    assert len(to_gnf(cfg, merge=False).families) == 4
    for w in (b'{"ab","cd","e",12}', b'{"","","",}', b'{"' + b"a" * 40 + b'","","",}'):
        assert gnf.accepts(w)
    assert not gnf.accepts(b'{"' + b"a" * 41 + b'","","",}') and not gnf.accepts(b'{"","","' + b"a" * 31 + b'",}')


def test_small_bounds_still_unroll():
    cfg = lower(parse_ebnf(f"root ::= [a-z]{{2,{COUNTED_THRESHOLD}}}"))
    assert not cfg.counted


# -- languages: counted GNF == unrolled GNF ---------------------------------------------------
LANGUAGES = [
    ('root ::= "a" [b-c]{0,5} "d"', b"abcd"),
    ("root ::= [a-c]{2,5}", b"abc"),
    ('root ::= ("ab" | "c"){1,4} "x"', b"abcx"),
    ("root ::= ([0-9]*){2,4}", b"09a"),  # a nullable item: the lower bound is 0
    ('root ::= ("x" root "y" | "z"){0,3}', b"xyz"),  # recursion through the item
    ('root ::= "[" (item ("," item){0,3})? "]"\nitem ::= [0-9]{1,3} | root', b"[],0"),  # nested
    ("root ::= [a]{3,}", b"ab"),  # unbounded: members saturate at F_(min-1)
    ("root ::= [a]{1,}", b"ab"),
    ('root ::= ("a" | ""){2,4} "b"', b"ab"),
    ("root ::= ([a-b]{2,3}){2,3}", b"ab"),  # counted inside counted
    ('root ::= "\\"" [^"\\\\]{3,6} "\\"" [0-9]{0,2}', b'"a\\0'),
    # equal repetitions of equal items are merged into one family; other bounds stay apart
    ('root ::= "a" x{0,3} "b" | "c" y{0,3} "a" | "b" z{0,2} "c"\nx ::= [b-c]\ny ::= [b-c]\nz ::= [b-c]', b"abc"),
    ('root ::= ("a" [b]{1,2}){0,2} "c" | ("c" [b]{1,2}){0,2} "a"', b"abc"),  # merged items hold merged families
]


@pytest.mark.parametrize("text,alphabet", LANGUAGES, ids=[t for t, _ in LANGUAGES])
def test_counted_language_equals_unrolled(text, alphabet):
    unrolled, counted = _gnf(text, 1000), _gnf(text, 0)
    assert counted.families and not unrolled.families
    words = [bytes(w) for n in range(6) for w in itertools.product(alphabet, repeat=n)]
    # and runs of each byte around every bound the grammars use
    words += [bytes([b]) * k for b in alphabet for k in range(6, 16)]
    for w in words:
        for prefix in (False, True):
            assert counted.accepts(w, prefix=prefix) == unrolled.accepts(w, prefix=prefix), (w, prefix)


# -- engines against XGrammar: a toy vocabulary whose runs reach every bound ------------------
RUNS = [b"a" * k for k in range(2, 9)] + [b'a"', b'aa"', b'"a', b'"aa', b"0" * 3, b"00", b'",', b'"]']
COUNTED_TOKENS = JSON_PIECES + RUNS + [b"", b""]  # then a stop and a special id
STOP, SPECIAL = len(COUNTED_TOKENS) - 2, len(COUNTED_TOKENS) - 1

BOUNDED = [
    'root ::= "\\"" [a-b]{0,20} "\\""',  # maxLength
    'root ::= "\\"" [a-b]{17,21} "\\""',  # minLength and maxLength close together
    'root ::= "\\"" [a-b]{18,} "\\""',  # minLength only (unbounded, saturating)
    'root ::= "[" ("\\"" "a"{0,3} "\\"" ("," "\\"" "a"{0,3} "\\""){0,18})? "]"',  # maxItems
    'root ::= ("a" | "0"){20,24}',  # nothing after the repetition: the stop bit at the bound
    # two properties' strings of one maxLength (one merged family) and a third of another
    'root ::= "[" "\\"" [a-b]{0,20} "\\"" ("," "\\"" [a-b]{0,20} "\\"" ("," "\\"" [a-b]{0,18} "\\"")?)? "]"',
]


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(COUNTED_TOKENS, stop_ids=[STOP], special_ids=[SPECIAL], name="counted-toy")


def _engines(text: str, vocab, threshold: int = COUNTED_THRESHOLD):
    compiled = compile_grammar(text, counted_threshold=threshold)
    result = build_classes(compiled, vocab)
    engines = compile_engines(text, vocab, result.classes)
    native = build_native_engine(compiled, vocab, result.classes, classing=result, xgrammar_engines=engines)
    return compiled, engines, native


def _docs(text: str) -> list[str]:
    """Documents at and just past each bound of the BOUNDED grammars."""
    out = []
    for n in (0, 17, 18, 19, 20, 21, 22):
        out += ['"' + "ab" * (n // 2) + "a" * (n % 2) + '"', "a" * n, "a0" * (n // 2)]
    out += ["[" + ",".join(['"aa"'] * k) + "]" for k in (1, 18, 19, 20)]
    return out


@pytest.mark.parametrize("engine", ["compressed", "native"])
@pytest.mark.parametrize("text", BOUNDED)
def test_masks_equal_xgrammar_near_the_bounds(toy, text, engine):
    compiled, engines, native = _engines(text, toy)
    assert compiled.gnf.families, "the bound must be counted, not unrolled"
    candidate = native.matcher if engine == "native" else None
    report = verify_engines(
        engines, candidate=candidate, candidate_name=engine, walks=40, steps=40, seed=1, docs=_docs(text)
    )
    assert report.ok, report.first_mismatch
    assert report.steps_checked > 300 and report.stops_reached > 0
    if engine == "native":
        assert native.fallbacks == 0


def test_counted_classes_tell_apart_only_what_the_bound_can(toy):
    """Runs of 2..8 letters stay apart (near the bound k letters fit only while k are left),
    while equal runs of different letters share a class."""
    _, _, native = _engines('root ::= "\\"" [a-b]{0,20} "\\""', toy)
    classes = native.classes
    ids = {bytes(toy.token_bytes[i]): i for i in range(toy.vocab_size)}
    runs = [classes.class_of[ids[b"a" * k]] for k in range(2, 9)]
    assert len(set(runs)) == len(runs)
    assert classes.class_of[ids[b"a"]] == classes.class_of[ids[b"b"]]


def test_the_native_state_holds_one_member_per_position(toy):
    """A long document walks F_1, F_2, ... as plain ints: the state never lists the bound."""
    _, _, native = _engines('root ::= "\\"" [a-b]{0,5000} "\\""', toy)
    m = native.matcher()
    ids = {bytes(toy.token_bytes[i]): i for i in range(toy.vocab_size)}
    assert m.accept_token(ids[b'"'])
    before = len(native.walker.store)

    def allowed(token: bytes) -> bool:
        bits = np.unpackbits(np.ascontiguousarray(m.vocab_row()).view(np.uint8), bitorder="little")
        return bool(bits[ids[token]])

    for _ in range(624):
        assert m.accept_token(ids[b"aaaaaaaa"])
    assert len(native.walker.store) - before < 624 * 40  # a few nodes a token, none per bound
    assert allowed(b"aaaaaaaa") and allowed(b'a"')  # 4,992 letters: 8 more fit
    assert m.accept_token(ids[b"aaaa"]) and allowed(b"aaaa") and not allowed(b"aaaaa")
    assert m.accept_token(ids[b"aaaa"])  # 5,000: the bound
    assert not allowed(b"a") and not allowed(b'a"') and allowed(b'"')
    assert not m.accept_token(ids[b"a"])


def test_a_served_counted_grammar_counts_its_steps_sizes_in_classings_store(toy, monkeypatch):
    """A counted normal form built in a Python WordStore (``COUNTED_IN_COMPILED_STORE`` off, or symbols past
    the compiled store's packing) is classed in a compiled store seeded with its nodes; the grammar a cache
    keeps counts its steps' sizes there (in C): the same sizes."""
    from cfgzip_lab.cache.grammars import _kept_grammar
    from cfgzip_lab.grammar import compiled_words
    from cfgzip_lab.grammar.compiled_words import CompiledWordStore

    monkeypatch.setattr(compiled_words, "COUNTED_IN_COMPILED_STORE", False)
    text = BOUNDED[-1]
    reference = [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in compile_grammar(text).gnf.steps]
    compiled = compile_grammar(text)
    result = build_classes(compiled, toy)
    if not isinstance(result.displacer.store, CompiledWordStore):
        pytest.skip("the compiled kernel is not built")
    assert type(compiled.gnf.store).__name__ == "WordStore"
    kept, _ = _kept_grammar(compiled, result.displacer)
    assert [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in kept.gnf.steps] == reference
