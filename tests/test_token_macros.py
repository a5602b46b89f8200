"""Token(...), ExcludeToken(...), TokenTagDispatch(...): XGrammar 0.2.8's meaning, and cfgzip exact on it.

Every claim in :mod:`cfgzip_lab.grammar.token_macros` is pinned here against the installed
binary (tables of grammar, token ids, what XGrammar does), and the engines are verified against
plain XGrammar on every grammar of XGrammar's own test suite that uses the macros.
"""

from __future__ import annotations

import glob
import random
import re

import numpy as np
import pytest
import xgrammar as xgr
from paths import CORPORA

from cfgzip_lab.engine import compile_engines
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.token_macros import (
    TOKEN_REGION_REFUSAL,
    TokenIdError,
    guide_token_ids,
    rewrite_for_representatives,
    stop_tokens_as_terminals,
    token_atoms,
)
from cfgzip_lab.native.engine import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_engines
from cfgzip_lab.vocab import vocab_from_bytes

# ids: 0 "a", 1 "b", 2 "ab", 3 stop, 4 special, 5 "zz", 6 "q", 7 "a" again, 8 "dd", 9 "hello"
SMALL = [b"a", b"b", b"ab", b"</s>", b"", b"zz", b"q", b"a", b"dd", b"hello"]
STOP, SPECIAL = 3, 4


# XGrammar 0.2.9 changed what ExcludeToken, TokenTagDispatch and a Token naming a stop id take
# (token_macros.stop_tokens_as_terminals); cfgzip refuses them there, so the tests of their 0.2.8
# meaning run under 0.2.8 only; tests/test_xgrammar_differences.py pins 0.2.9's and the refusal.
only_028 = pytest.mark.skipif(
    stop_tokens_as_terminals(), reason="XGrammar >= 0.2.9: refused by cfgzip (test_xgrammar_differences pins it)"
)


def _served_here(text: str) -> bool:
    """Whether cfgzip serves this grammar under the installed XGrammar (see ``only_028``)."""
    named_stop = any(str(STOP) in ids.split(", ") for ids in re.findall(r"\bToken\(([^)]*)\)", text))
    return not stop_tokens_as_terminals() or not ("ExcludeToken" in text or "TokenTagDispatch" in text or named_stop)


def small_vocab():
    return vocab_from_bytes(SMALL, stop_ids=[STOP], special_ids=[SPECIAL], name="small")


def xgrammar_compiled(text: str, vocab):
    from cfgzip_lab.engine import plain_tokenizer_info

    return xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False).compile_grammar(text)


def xgrammar_mask(matcher, size: int) -> list[int]:
    bitmask = xgr.allocate_token_bitmask(1, size)
    matcher.fill_next_token_bitmask(bitmask)
    return [i for i in range(size) if (int(bitmask[0, i // 32]) >> (i % 32)) & 1]


# grammar, token ids fed in turn, what XGrammar 0.2.8 answers for each (and the mask before the first)
SEMANTICS = [
    # a token edge takes the token whole, whatever its bytes: "zz" then the byte path "b"
    ('root ::= Token(5) "b"', [5, 1], [True, True], [5]),
    # ...and nothing else: "a" has no byte edge to take here
    ('root ::= Token(5) "b"', [0], [False], [5]),
    # both paths from one state, merged: token 2 whole, or "a" then "b" by bytes
    ('root ::= Token(2) | "ab"', [2], [True], [0, 2, 7]),
    ('root ::= Token(2) | "ab"', [0, 1], [True, True], [0, 2, 7]),
    # a named token read by bytes where the grammar has byte edges: id 0 is "a"
    ('root ::= Token(0) "b" | "ab"', [2], [True], [0, 2, 7]),
    # a stop token is never taken whole; a special one is never accepted
    ('root ::= "a" Token(3)', [0, 3], [True, False], [0, 7]),
    ('root ::= "a" Token(4)', [0, 4], [True, False], [0, 7]),
    # ExcludeToken: any normal token but the listed ones (no stop, no special)
    ("root ::= ExcludeToken(0, 5)", [6], [True], [1, 2, 6, 7, 8, 9]),
    ("root ::= ExcludeToken(0, 5)", [0], [False], [1, 2, 6, 7, 8, 9]),
    ("root ::= ExcludeToken(0, 5)", [3], [False], [1, 2, 6, 7, 8, 9]),
    # two ids with the same bytes are still two ids
    ("root ::= Token(7)", [0], [False], [7]),
    # TokenTagDispatch: any tokens but triggers and excludes, a trigger, its rule, again (loop)
    ('root ::= TokenTagDispatch((6, r), excludes=(9,))\nr ::= "b"', [0, 6, 1, 2, 6, 1], [True] * 6, None),
    ('root ::= TokenTagDispatch((6, r), excludes=(9,))\nr ::= "b"', [9], [False], None),
    # without the loop nothing follows the rule
    (
        'root ::= TokenTagDispatch((6, r), loop_after_dispatch=false)\nr ::= "b"',
        [0, 6, 1, 0],
        [True, True, True, False],
        None,
    ),
    # the dispatched rule is bytes: "b" by its bytes, not token 1 whole (both work: "b" is id 1)
    ('root ::= TokenTagDispatch((6, r))\nr ::= "ab"', [6, 0, 1], [True, True, True], None),
    ('root ::= TokenTagDispatch((6, r))\nr ::= "ab"', [6, 2, 6, 7], [True, True, True, True], None),
]


@pytest.mark.parametrize("grammar__ids__accepted__first_mask", SEMANTICS, ids=lambda r: f"{r[0][:40]}|{r[1]}")
def test_grammar__ids__accepted__first_mask(grammar__ids__accepted__first_mask) -> None:
    """XGrammar 0.2.8 answers as the module says, and the native engine answers the same."""
    text, ids, accepted, first_mask = grammar__ids__accepted__first_mask
    if not _served_here(text):
        pytest.skip("XGrammar >= 0.2.9: refused by cfgzip (test_xgrammar_differences pins it)")
    vocab = small_vocab()
    matcher = xgr.GrammarMatcher(xgrammar_compiled(text, vocab))
    if first_mask is not None:
        assert xgrammar_mask(matcher, vocab.vocab_size) == first_mask
    got = []
    for t in ids:
        got.append(bool(matcher.accept_token(t)))
        if not got[-1]:
            break
    assert got == accepted[: len(got)] and len(got) == len(accepted)

    compiled = compile_grammar(text)
    result = build_classes(compiled, vocab)
    native = build_native_engine(compiled, vocab, result.classes, classing=result).matcher()
    ours = []
    for t in ids:
        ours.append(bool(native.accept_token(t)))
        if not ours[-1]:
            break
    assert ours == got


def test_accept_string_never_takes_a_token_edge() -> None:
    """Bytes fed as a string only follow byte edges (``Token(0)`` is "a", yet "a" is refused);
    our GNF's byte view says the same, and sentences are text-only."""
    vocab = small_vocab()
    matcher = xgr.GrammarMatcher(xgrammar_compiled('root ::= Token(0) | "b"', vocab))
    assert not matcher.accept_string("a")
    gnf = compile_grammar('root ::= Token(0) | "b"').gnf
    assert not gnf.accepts(b"a") and gnf.accepts(b"b")
    from cfgzip_lab.grammar.sentences import generate

    assert {s.data for s in generate(compile_grammar('root ::= Token(0) | "b"').cfg, 5)} == {b"b"}
    with pytest.raises(ValueError, match="whole token by its id"):
        generate(compile_grammar("root ::= Token(0)").cfg, 1)


@only_028
def test_parse_trees_and_authoring_facts_see_a_token_as_a_terminal_no_text_matches() -> None:
    """The workbench's Earley parses and FIRST/shortest facts (issue 21) over a token macro:
    like the GNF, no text takes ``Token(...)``, a parse stopped before one says it expected it,
    and a rule made of tokens still has a (placeholder) shortest sentence, so it never "never ends"."""
    from cfgzip_lab.grammar.authoring import first_terminals, never_ending, shortest_sentences
    from cfgzip_lab.grammar.earley import EarleyGrammar, describe_expected

    text = 'root ::= "a" (Token(5, 7) | "b") "c" | t\nt ::= TokenTagDispatch((9, u))\nu ::= "u"\n'
    ast = compile_grammar(text).ast
    parser = EarleyGrammar(ast)
    assert parser.parse("abc").accepted and not parser.parse("ac").accepted
    stop = parser.parse("ax")
    assert describe_expected(stop.expected, stop.expected_rules) == 'expected Token(5, 7) or "b" (rule root, line 1)'
    assert {e.kind for e in parser.parse("").expected} >= {"token", "literal"}
    assert [t.text for t in first_terminals(ast)["t"]] == ["ExcludeToken(9)", "Token(9)"]
    assert shortest_sentences(ast)["t"] == (0, "") and shortest_sentences(ast)["u"] == (1, "u")
    assert shortest_sentences(compile_grammar("root ::= Token(3) Token(4)").ast)["root"] == (2, "⟨Token(3)⟩⟨Token(4)⟩")
    assert never_ending(compile_grammar("root ::= Token(3) root | ExcludeToken(1)").ast) == []


# grammar, a piece of XGrammar 0.2.8's error (ours says the same, or more where noted)
PARSE_ERRORS = [
    ("root ::= Token()", "Token() requires at least one integer argument"),
    ("root ::= ExcludeToken()", "ExcludeToken() requires at least one integer argument"),
    ("root ::= Token(a)", "Token() arguments must be non-negative integers"),
    ('root ::= Token("1")', "Token() arguments must be non-negative integers"),
    ("root ::= ExcludeToken(true)", "ExcludeToken() arguments must be non-negative integers"),
    ("root ::= Token(x=1)", "Token() does not accept named arguments"),
    ("root ::= ExcludeToken(1, x=1)", "ExcludeToken() does not accept named arguments"),
    ('root ::= TokenTagDispatch((3, b), foo=1)\nb ::= "b"', "Unknown named argument for TokenTagDispatch: foo"),
    ("root ::= TokenTagDispatch(3)", "Each TokenTagDispatch element must be a pair (token_id, rule)"),
    (
        'root ::= TokenTagDispatch((3, b, b))\nb ::= "b"',
        "Each TokenTagDispatch element must be a pair (token_id, rule)",
    ),
    ('root ::= TokenTagDispatch(("3", b))\nb ::= "b"', "Token trigger ID must be a non-negative integer"),
    ('root ::= TokenTagDispatch((3, "b"))\nb ::= "b"', "Rule reference must be an identifier"),
    ('root ::= TokenTagDispatch((3, b), loop_after_dispatch=1)\nb ::= "b"', "loop_after_dispatch must be a boolean"),
    ('root ::= TokenTagDispatch((3, b), excludes=4)\nb ::= "b"', "excludes must be a tuple"),
    (
        'root ::= TokenTagDispatch((3, b), excludes=("x",))\nb ::= "b"',
        "Exclude token ID must be a non-negative integer",
    ),
    (
        'root ::= TokenTagDispatch((3, b), excludes=(3,))\nb ::= "b"',
        "Token trigger ID 3 must not overlap with exclude token ID",
    ),
]


@pytest.mark.parametrize("grammar__message", PARSE_ERRORS, ids=lambda r: r[1][:40])
def test_grammar__message(grammar__message) -> None:
    text, message = grammar__message
    with pytest.raises(RuntimeError, match="EBNF parser error") as xgrammar_error:
        xgr.Grammar.from_ebnf(text)
    assert message in str(xgrammar_error.value)
    with pytest.raises(GrammarError) as ours:
        compile_grammar(text)
    assert message in str(ours.value)


def test_undefined_dispatch_rule_and_wrapping_ids_are_refused() -> None:
    with pytest.raises(RuntimeError, match='Rule "nope" is not defined'):
        xgr.Grammar.from_ebnf("root ::= TokenTagDispatch((3, nope))")
    with pytest.raises(GrammarError, match="nope"):
        compile_grammar("root ::= TokenTagDispatch((3, nope))")
    # XGrammar 0.2.8 keeps ids as int32 and wraps larger ones without a word
    assert "Token(1)" in str(xgr.Grammar.from_ebnf("root ::= Token(4294967297)"))
    with pytest.raises(GrammarError, match="32-bit token ids"):
        compile_grammar("root ::= Token(4294967297)")


def test_ids_past_the_vocabulary_are_refused_at_their_place() -> None:
    """XGrammar refuses them when compiling for the tokenizer; so does classing, saying where."""
    vocab = small_vocab()
    text = 'root ::= "a" rest\nrest ::= Token(1, 12) | "b"'
    with pytest.raises(RuntimeError, match="Token id 12 in the grammar is out of the vocabulary range"):
        xgrammar_compiled(text, vocab)
    with pytest.raises(TokenIdError, match=r"line 2, column 10: the grammar names token id 12, but tokenizer 'small'"):
        build_classes(compile_grammar(text), vocab)


@only_028
def test_a_class_may_mix_named_and_unnamed_tokens_the_grammar_cannot_tell_apart() -> None:
    """``Token(6) | ExcludeToken(5)``: token 6 does what every unnamed token does, so they share
    a class; token 5 is taken by neither path and is blocked; the ids become classes for XGrammar."""
    vocab = small_vocab()
    compiled = compile_grammar("root ::= Token(6) | ExcludeToken(5)")
    classes = build_classes(compiled, vocab).classes
    of = classes.class_of
    assert of[6] == of[0] == of[8] and of[5] == classes.blocked_class()
    text = rewrite_for_representatives(compiled.text, classes.representatives, classes.class_kind)
    rep = int(classes.representatives[of[6]])
    expected_token = f"Token({of[6]})" if rep == 6 else f"Token({classes.blocked_class()})"
    assert text == f"root ::= {expected_token} | ExcludeToken({classes.blocked_class()})"
    engines = compile_engines(compiled.text, vocab, classes)
    assert verify_engines(engines, walks=20, steps=8, seed=1).mismatches == 0
    # the native index read off the representatives (no classing result: a cache without an index)
    native = build_native_engine(compiled, vocab, classes, xgrammar_engines=engines)
    assert verify_engines(engines, walks=20, steps=8, seed=1, candidate=native.matcher).mismatches == 0


def test_rewrite_for_representatives_names_classes() -> None:
    reps = [4, 9, 3, 10, 20]  # class k's representative; classes 0 and 1 are BLOCKED and STOP
    kinds = [2, 1, 0, 0, 0]
    text = (
        "root ::= Token(3, 20, 7) ExcludeToken(10) ExcludeToken(8) Token(8) ttd\n"
        "ttd ::= TokenTagDispatch(\n  (3, a),\n  (8, b),\n  (20, a),\n  loop_after_dispatch=false,\n  excludes=(10, 11)\n)\n"
        'a ::= "Token(3)"\nb ::= "b"'
    )
    assert rewrite_for_representatives(text, reps, kinds) == (
        "root ::= Token(2, 4) ExcludeToken(3) ExcludeToken(0) Token(0) ttd\n"
        "ttd ::= TokenTagDispatch((2, a), (4, a), loop_after_dispatch=false, excludes=(3, ))\n"
        'a ::= "Token(3)"\nb ::= "b"'
    )
    # without a STOP or BLOCKED class an empty list is said otherwise
    assert rewrite_for_representatives("root ::= Token(5) | ExcludeToken(5)", [0, 1], [0, 0]) == (
        "root ::= [] | Token(0, 1)"
    )


@only_028
def test_token_atoms_are_read_off_the_gnf_and_survive_a_cache(tmp_path) -> None:
    """A named id no terminal takes (``ExcludeToken(5)`` alone) still gets an atom, and the GNF's
    token atoms read back from a class cache; a native engine loaded from disk stays exact."""
    from cfgzip_lab.cache.grammars import GrammarCache

    text = 'root ::= ExcludeToken(5) "b" | Token(2, 6)'
    gnf = compile_grammar(text).gnf
    atoms = token_atoms(gnf)
    assert set(atoms.named) == {2, 5, 6} and atoms.other is not None
    assert atoms.named[2] == atoms.named[6] != atoms.named[5]
    assert "<token 2|6>" in gnf.to_text()
    vocab = small_vocab()
    built = GrammarCache(cache_dir=tmp_path, write_after=0).get(text, vocab, kind="ebnf")  # written, however fast
    loaded = GrammarCache(cache_dir=tmp_path).get(text, vocab, kind="ebnf")
    assert (built.origin, loaded.origin) == ("built", "disk")
    assert token_atoms(loaded.compiled.gnf) == atoms
    engines = compile_engines(text, vocab, loaded.classes)
    report = verify_engines(
        engines, walks=20, steps=6, seed=2, candidate=loaded.engine.matcher, candidate_name="native"
    )
    assert report.mismatches == 0 and report.steps_checked > 40


def toy_vocab_128():
    """128 ids (the corpus names ids up to 99): letters, digits and the corpus grammars' words."""
    import string

    pieces = [c.encode() for c in string.ascii_lowercase + string.digits] + [
        *(
            w.encode()
            for w in "fn( , ) { } [ ] ; : aa dd bb hello A B C D E </end> X Y ab done w ! <call> <end> <bad> <".split()
        ),
    ]
    tokens = [
        pieces[i % len(pieces)] if i < len(pieces) else pieces[i % len(pieces)] + pieces[i * 7 % len(pieces)]
        for i in range(126)
    ]
    return vocab_from_bytes(tokens + [b"", b"</s>"], stop_ids=[127], special_ids=[126], name="toy128")


def corpus_token_grammars() -> list[str]:
    files = sorted(glob.glob(str(CORPORA / "xgrammar-tests" / "*.ebnf")))
    if not files:
        pytest.skip("the shared corpus is not checked out here")
    macro = re.compile(r"\b(?:Token|ExcludeToken|TokenTagDispatch)\(")
    return [f for f in files if macro.search(open(f, encoding="utf-8").read())]


def check_exact(text: str, vocab, *, walks: int, steps: int, seed: int = 0) -> tuple[int, int, int]:
    """Compressed and native engines against plain XGrammar: (steps checked, named tokens taken,
    mismatches), with walks that take the grammar's named tokens where allowed."""
    compiled = compile_grammar(text)
    result = build_classes(compiled, vocab)
    engines = compile_engines(compiled.text, vocab, result.classes)
    guides = guide_token_ids(compiled.gnf, vocab)
    native = build_native_engine(compiled, vocab, result.classes, classing=result, xgrammar_engines=engines)
    checked = taken = bad = 0
    for candidate, name in ((None, "compressed"), (native.matcher, "native")):
        report = verify_engines(
            engines, walks=walks, steps=steps, seed=seed, token_guides=guides, candidate=candidate, candidate_name=name
        )
        assert report.xgrammar_disagreements == 0, report.first_mismatch
        checked, taken, bad = checked + report.steps_checked, taken + report.guide_tokens_taken, bad + report.mismatches
    assert native.fallbacks == 0
    return checked, taken, bad


def test_every_corpus_grammar_with_token_macros_is_exact_with_a_toy_vocabulary() -> None:
    """All of XGrammar's own test grammars that use the macros (51 parse; the two with
    ``max_tokens`` are refused for that), compressed and native, on a 128-id vocabulary."""
    vocab = toy_vocab_128()
    served = refused = total_taken = 0
    for path in corpus_token_grammars():
        text = open(path, encoding="utf-8").read()
        try:
            compile_grammar(text)
        except GrammarError as error:
            refused_here = stop_tokens_as_terminals() and TOKEN_REGION_REFUSAL in str(error)
            assert "max_tokens" in str(error) or refused_here, path
            refused += 1
            continue
        checked, taken, bad = check_exact(text, vocab, walks=4, steps=16)
        assert bad == 0, path
        served, total_taken = served + 1, total_taken + taken
    if stop_tokens_as_terminals():  # 0.2.9: ExcludeToken/TokenTagDispatch refused, 22 Token(...) grammars left
        assert served >= 20 and total_taken > 50, (served, refused, total_taken)
    else:
        assert served >= 51 and refused <= 2
        assert total_taken > 200  # the walks did take the named tokens


@pytest.mark.slow
def test_a_seeded_sample_of_the_corpus_token_grammars_is_exact_with_llama3() -> None:
    """With a real tokenizer (ids 0-99 are Llama-3's punctuation and letters: normal tokens)."""
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab("llama3")
    paths = corpus_token_grammars()
    sample = random.Random(0).sample(paths, 8)
    taken_total = 0
    for path in sample:
        text = open(path, encoding="utf-8").read()
        try:
            compile_grammar(text)
        except GrammarError:
            continue
        checked, taken, bad = check_exact(text, vocab, walks=3, steps=24)
        assert bad == 0 and checked > 0, path
        taken_total += taken
    assert taken_total > 0


def test_describe_named_tokens_says_what_the_ids_are_in_this_vocabulary() -> None:
    from cfgzip_lab.grammar.token_macros import describe_named_tokens

    lines = describe_named_tokens(compile_grammar("root ::= Token(3, 5, 9)").gnf, small_vocab())
    assert lines == ["3 → a stop token (never taken as a whole token)", "5 → 'zz'", "9 → 'hello'"]
    assert np.array_equal(guide_token_ids(compile_grammar("root ::= Token(3, 5, 9)").gnf, small_vocab()), [5, 9])
