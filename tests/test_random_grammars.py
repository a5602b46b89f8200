"""Random grammars in XGrammar's EBNF: our normal form and classes against XGrammar itself.

A hypothesis strategy builds small grammars (1-4 rules) from alternation, sequences,
repetition (``* + ? {m} {m,} {m,n}``), literals and character classes (negated ones and
non-ASCII code points included), references to other rules, left and right recursion, and
nullable bodies. Every rule is productive by construction (its first alternative refers
only to rules defined after it), so XGrammar, which can crash on a rule with no way out, only
ever sees grammars with a non-empty language. For each grammar:

- XGrammar and we both accept it;
- our GNF and XGrammar give the same (valid prefix, sentence) verdict on every string of up
  to 3 characters over the grammar's alphabet plus an outsider, on sampled sentences, their
  byte prefixes (partial UTF-8 included) and single-byte mutations; the lowered CFG agrees
  too (an Earley recognizer independent of the GNF code);
- the displacement classes over a small vocabulary (all 1- and 2-character strings over the
  alphabet, partial UTF-8 pieces, a stop token) are exact: every class is wholly allowed or
  wholly refused at every state XGrammar's walks reach, and the compressed engine's expanded
  mask equals plain XGrammar's (:func:`cfgzip_lab.verify.verify_lossless`).

A second property mutates such grammar texts (deleted, inserted and swapped characters) and
asks the front end to either accept the result or raise a :class:`GrammarError` whose every
error has a line and a column; any other exception fails.

``CFGZIP_RANDOM_GRAMMAR_EXAMPLES`` sets the number of examples (500 by default, derandomized
so CI sees the same ones; any other number draws fresh ones): ``benchmarks/sweep.py
--random-grammars N`` runs it longer.
"""

from __future__ import annotations

import itertools
import os
import random

import numpy as np
import pytest
import xgrammar
from grammar_tools import earley_accepts, mutations, sample, xgrammar_matcher
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cfgzip_lab.classes.classing import NORMAL
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.nested_root import nested_root_reference
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_lossless
from cfgzip_lab.vocab import NORMAL as TOKEN_NORMAL
from cfgzip_lab.vocab import vocab_from_bytes

EXAMPLES = int(os.environ.get("CFGZIP_RANDOM_GRAMMAR_EXAMPLES", "500"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="CFGZIP_RANDOM_GRAMMAR_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# The characters grammars are made of: ASCII, two-byte (é ü) and three-byte (中) UTF-8, and a
# newline. OUTSIDER never appears in a grammar, so negated classes are told apart from the rest.
CHARS = ["a", "b", "c", "é", "ü", "中", "\n"]
OUTSIDER = "z"
ESCAPED = {"\n": "\\n"}
RULES = ["root", "r1", "r2", "r3"]

# ---- the strategy -------------------------------------------------------------------------


def _char(c: str) -> str:
    return ESCAPED.get(c, c)


@st.composite
def literals(draw) -> str:
    text = draw(st.lists(st.sampled_from(CHARS), min_size=0, max_size=3))
    return '"' + "".join(_char(c) for c in text) + '"'


@st.composite
def char_classes(draw) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            items.append(_char(draw(st.sampled_from(CHARS))))
        else:
            lo, hi = sorted(draw(st.lists(st.sampled_from(CHARS[:6]), min_size=2, max_size=2)), key=ord)
            items.append(f"{lo}-{hi}")
    return "[" + ("^" if draw(st.booleans()) else "") + "".join(items) + "]"


def _repeat(draw) -> str:
    kind = draw(st.sampled_from(["*", "+", "?", "{m}", "{m,}", "{m,n}"]))
    m = draw(st.integers(0, 2))
    n = m + draw(st.integers(0, 2))
    return kind.replace("m", str(m)).replace("n", str(n))


@st.composite
def expressions(draw, refs: list[str], depth: int) -> str:
    """An expression over ``refs`` (rule names it may mention), at most ``depth`` levels deep."""
    leaves = [literals(), char_classes()] + ([st.sampled_from(refs)] if refs else [])
    if depth == 0:
        return draw(st.one_of(leaves))
    kind = draw(st.sampled_from(["leaf", "leaf", "seq", "alt", "rep"]))
    if kind == "leaf":
        return draw(st.one_of(leaves))
    if kind == "rep":
        inner = draw(expressions(refs, depth - 1))
        return f"({inner}){_repeat(draw)}"
    parts = draw(st.lists(expressions(refs, depth - 1), min_size=2, max_size=3))
    return "(" + (" " if kind == "seq" else " | ").join(parts) + ")"


@st.composite
def grammars(draw) -> str:
    """Grammar text: ``root`` and up to three more rules, each productive by construction."""
    names = RULES[: draw(st.integers(1, 4))]
    lines = []
    for i, name in enumerate(names):
        later = names[i + 1 :]
        # First alternative: only rules after this one (so every rule derives some string).
        alts = [draw(expressions(later, 2))]
        for _ in range(draw(st.integers(0, 2))):
            shape = draw(st.sampled_from(["any", "left", "right", "nullable"]))
            body = draw(expressions(names, 1))
            if shape == "left":
                body = f"{name} {body}"
            elif shape == "right":
                body = f"{body} {name}"
            elif shape == "nullable":
                body = '""'
            alts.append(body)
        lines.append(f"{name} ::= " + " | ".join(alts))
    return "\n".join(lines) + "\n"


# ---- checks -------------------------------------------------------------------------------

ENUMERATED = [
    "".join(p) for k in range(4) for p in itertools.product([*CHARS[:3], "é", "中", "\n", OUTSIDER], repeat=k)
]

VOCAB_STRINGS = sorted({"".join(p) for k in (1, 2) for p in itertools.product([*CHARS, OUTSIDER], repeat=k)})
PIECES = [b"\xc3", b"\xa9", b"\xbc", b"\xe4", b"\xe4\xb8", b"\xb8\xad", b"\xad", b"a\xc3", b"\xa9a", b"\xa9\xc3"]
VOCAB_TOKENS = [s.encode() for s in VOCAB_STRINGS] + PIECES + [b"abc", "a中é".encode(), b""]
VOCAB = vocab_from_bytes(VOCAB_TOKENS, stop_ids=[len(VOCAB_TOKENS) - 1], name="random-grammar-toy")


def xgrammar_verdicts(matcher: xgrammar.GrammarMatcher, data: bytes) -> tuple[bool, bool]:
    matcher.reset()
    ok = matcher.accept_string(data)
    return ok, ok and matcher.is_terminated()


def probe_strings(compiled, rng: random.Random) -> tuple[list[bytes], set[bytes]]:
    """Enumerated strings, sampled sentences with every byte prefix and a few mutations; and the sentences."""
    strings = [s.encode() for s in ENUMERATED]
    alphabet = bytes(sorted({b for s in VOCAB_TOKENS for b in s}))
    sampled = set()
    for _ in range(4):
        data = sample(compiled.ast, rng, free_depth=3).encode("utf-8", "surrogatepass")
        sampled.add(data)
        strings += [data[:k] for k in range(len(data) + 1)]
        strings += mutations(data, rng, alphabet, 4)
    return strings, sampled


def assert_same_language(text: str, compiled, rng: random.Random) -> None:
    matcher = xgrammar_matcher(text)
    strings, sampled = probe_strings(compiled, rng)
    short = {s.encode() for s in ENUMERATED if len(s) <= 2}
    for data in strings:
        ours = compiled.gnf.accepts(data, prefix=True), compiled.gnf.accepts(data)
        theirs = xgrammar_verdicts(matcher, data)
        assert ours == theirs, f"{data!r}: GNF (prefix, sentence) = {ours}, XGrammar = {theirs}"
        if data in short or (data in sampled and len(data) <= 24):  # Earley in Python is slow
            assert earley_accepts(compiled.cfg, data) == ours[1], f"{data!r}: CFG and GNF disagree"


def language_mask(byte_matcher: xgrammar.GrammarMatcher, prefix: bytes) -> np.ndarray:
    """Allowed tokens after ``prefix`` by the language alone: ``prefix + token`` is a valid
    prefix (XGrammar's byte-level matcher); the stop token when ``prefix`` is a sentence."""
    allowed = np.zeros(VOCAB.vocab_size, dtype=bool)
    for t, data in enumerate(VOCAB.token_bytes):
        if data and VOCAB.kinds[t] == TOKEN_NORMAL:
            byte_matcher.reset()
            allowed[t] = byte_matcher.accept_string(prefix + data)
    byte_matcher.reset()
    complete = (byte_matcher.accept_string(prefix) if prefix else True) and byte_matcher.is_terminated()
    allowed[list(VOCAB.stop_ids)] = complete
    return allowed


def token_mask(grammar, ids: list[int]) -> np.ndarray:
    """XGrammar's own next-token mask after the tokens ``ids``."""
    matcher = xgrammar.GrammarMatcher(grammar)
    for t in ids:
        assert matcher.accept_token(t)
    bitmask = xgrammar.allocate_token_bitmask(1, VOCAB.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: VOCAB.vocab_size].astype(bool)


def assert_classes_exact(text: str, compiled, rng: np.random.Generator) -> None:
    """Every class wholly allowed or wholly refused by the language at every state of random
    walks; then the compressed engine == plain XGrammar (verify), except at states where
    XGrammar's token mask contradicts its own byte-level matcher (an upstream bug, pinned in
    ``test_xgrammar_left_recursive_mask_contradicts_its_matcher``): there the language decides."""
    classes = build_classes(compiled, VOCAB).classes
    grammar = xgrammar.GrammarCompiler(VOCAB.to_xgrammar(), cache_enabled=False).compile_grammar(text)
    byte_matcher = xgrammar_matcher(text)
    sizes = np.bincount(classes.class_of)
    xgrammar_errs = False
    for _ in range(3):
        ids: list[int] = []
        for _ in range(6):
            prefix = b"".join(VOCAB.token_bytes[t] for t in ids)
            allowed = language_mask(byte_matcher, prefix)
            hits = np.bincount(classes.class_of, weights=allowed.astype(np.int64), minlength=sizes.size)
            split = np.flatnonzero((hits > 0) & (hits < sizes))
            assert split.size == 0, f"after {prefix!r}: classes {split.tolist()} are partly allowed"
            xgrammar_errs |= not np.array_equal(token_mask(grammar, ids), allowed)
            choices = np.flatnonzero(allowed & (classes.class_kind[classes.class_of] == NORMAL))
            if choices.size == 0:
                break
            ids.append(int(rng.choice(choices)))
    if nested_root_reference(compiled.ast) is not None:  # the compressed engine is refused there
        with pytest.raises(GrammarError, match="the compressed engine refuses this grammar"):
            verify_lossless(text, VOCAB, classes, walks=1, steps=1, seed=0)
        return
    report = verify_lossless(text, VOCAB, classes, walks=4, steps=10, seed=0)
    if not report.ok:
        # a mismatch, or a step where XGrammar's own accept_token contradicts its mask
        m = report.first_mismatch or report.xgrammar_disagreement_examples[0]
        prefix = b"".join(VOCAB.token_bytes[t] for t in m["prefix_ids"])
        xgrammar_wrong = not np.array_equal(token_mask(grammar, m["prefix_ids"]), language_mask(byte_matcher, prefix))
        assert xgrammar_errs or xgrammar_wrong, m


@pytest.mark.slow
@SETTINGS
@given(grammars(), st.randoms(use_true_random=False))
# found by the strategy: XGrammar's mask refuses a token its own accept_token takes (reported apart)
@example('root ::= (("" | "a") [^a-中])\n', random.Random(0))
def test_random_grammar__gnf_language_and_classes_match_xgrammar(text, rng):
    try:
        xgrammar.Grammar.from_ebnf(text)
    except Exception as exc:  # noqa: BLE001 - XGrammar raises several types
        pytest.fail(f"XGrammar refuses a grammar of the strategy: {exc}\n{text}")
    compiled = compile_grammar(text)  # a GrammarError here fails the test: the grammar is valid
    assert_same_language(text, compiled, rng)
    assert_classes_exact(text, compiled, np.random.default_rng(rng.randrange(2**32)))


MUTATION_CHARS = list('"[]()|*+?{},:=^\\-. \n') + ["a", "r1", "root", "::=", "\\x", "\\u00e9", "é"]


@st.composite
def mutated_grammars(draw) -> str:
    text = draw(grammars())
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "replace"]))
        piece = draw(st.sampled_from(MUTATION_CHARS))
        if op == "delete":
            text = text[:i] + text[i + 1 :]
        elif op == "insert":
            text = text[:i] + piece + text[i:]
        else:
            text = text[:i] + piece + text[i + 1 :]
    return text


@pytest.mark.slow
@SETTINGS
@given(mutated_grammars())
def test_front_end_accepts_or_points_at_a_line_and_column(text):
    try:
        compile_grammar(text)
    except GrammarError as error:
        assert error.errors, f"GrammarError without an error diagnostic: {error!r}"
        lines = text.split("\n")
        for d in error.errors:
            assert d.message
            assert 1 <= d.line <= len(lines) + 1 and d.column >= 1, (d, text)


@pytest.mark.xfail(
    strict=True,
    reason="xgrammar 0.2.8: after left recursion through an empty "
    "alternative, the token mask refuses 2-byte tokens that accept_token takes",
)
def test_xgrammar_left_recursive_mask_contradicts_its_matcher():
    """Found by the random grammars: ``root ::= "" | root [b]`` over the tokens ``b`` and
    ``bb``. The language is ``b*``; XGrammar's mask at the start refuses ``bb``, its
    ``accept_token`` takes it. Classing follows the language (``b`` and ``bb`` share a class);
    when this passes, XGrammar was fixed and the exception in ``assert_classes_exact`` can go."""
    info = xgrammar.TokenizerInfo([b"b", b"bb"])
    grammar = xgrammar.GrammarCompiler(info, cache_enabled=False).compile_grammar('root ::= "" | root [b]')
    matcher = xgrammar.GrammarMatcher(grammar, terminate_without_stop_token=True)
    bitmask = xgrammar.allocate_token_bitmask(1, 2)
    matcher.fill_next_token_bitmask(bitmask)
    allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:2].astype(bool).tolist()
    assert xgrammar.GrammarMatcher(grammar, terminate_without_stop_token=True).accept_token(1)
    assert allowed == [True, True]
