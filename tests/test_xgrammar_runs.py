"""XGrammar's runs of rejection (a rejected token rejects the sorted tokens after it that hold it)
and the compressed vocabulary that keeps them as the full vocabulary has them (issue 31)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
import xgrammar as xgr

from cfgzip_lab.engine import compile_engines, compressed_tokenizer_info
from cfgzip_lab.expand import unpack_bitmask
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_lossless
from cfgzip_lab.vocab import vocab_from_bytes
from cfgzip_lab.xgrammar_runs import SortedRuns, run_fences, xgrammar_run_ends

# The smallest grammar that shows it: "ine" is refused at the start and occurs in "inline".
INLINE = 'root ::= "inline"\n'


def _allowed(grammar: str, vocab: list[bytes], prefix: str = "") -> set[bytes]:
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=[])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar))
    assert matcher.accept_string(prefix) if prefix else True
    mask = xgr.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(mask)
    words = mask[0].numpy().astype(np.uint32)
    return {t for i, t in enumerate(vocab) if (int(words[i // 32]) >> (i % 32)) & 1}


def test_a_refused_token_refuses_the_next_sorted_token_that_holds_it():
    """XGrammar's quirk, pinned: with ``"ine"`` its only neighbour, ``"inline"`` is refused; any
    token sorted between them that does not hold ``"ine"`` (``"inf"``) ends the run."""
    assert _allowed(INLINE, [b"inline"]) == {b"inline"}
    assert _allowed(INLINE, [b"ine", b"inline"]) == set()
    assert _allowed(INLINE, [b"ine", b"inf", b"inline"]) == {b"inline"}
    assert _allowed(INLINE, [b"ine", b"inea", b"inline"]) == set()  # "inea" holds "ine": the run goes on


@pytest.mark.parametrize(
    "tokens__ends",
    [
        ([b"ine", b"inline"], [2, 2]),
        ([b"ine", b"inf", b"inline"], [1, 2, 3]),
        ([b"a", b"ab", b"b", b"ba"], [2, 2, 4, 4]),  # "ba" holds "a", but "b" before it ends the run
        ([b"a\n", b"aa\n"], [2, 2]),
    ],
)
def test_run_ends_are_xgrammars_trie_subtrees(tokens__ends):
    tokens, ends = tokens__ends
    assert xgrammar_run_ends(tokens).tolist() == ends


def test_fences_end_runs_the_full_vocabulary_ends_and_bring_spurious_owners():
    runs = SortedRuns.of([b"ine", b"inf", b"inline", b"luk", b"luluk", b"lum"])
    assert runs.spurious_owners == {b"luluk": [b"luk"]}
    assert run_fences(runs, [b"ine", b"inline"]) == [b"inf"]
    assert run_fences(runs, [b"luluk"]) == [b"luk"]
    assert run_fences(runs, [b"ine", b"inf", b"inline"]) == []
    assert run_fences(runs, [b"absent"]) == []


def test_compressed_engine_allows_what_the_full_vocabulary_allows():
    """Issue 31's bit (htmlhint schema, Llama-3): "ine" and "inline" representatives with nothing
    sorted between them refused "inline" in the compressed vocabulary; "inf" is listed now."""
    vocab = vocab_from_bytes([b"zz", b"ine", b"inf", b"inline", b""], stop_ids=[4], name="inline")
    classes = build_classes(compile_grammar(INLINE), vocab).classes
    reps = {bytes(vocab.token_bytes[int(r)]) for r in classes.representatives if vocab.token_bytes[int(r)]}
    assert reps == {b"zz", b"ine", b"inline"}  # "inf" is refused everywhere, as "zz" which represents it
    assert b"inf" in [bytes(b) for b in compressed_tokenizer_info(vocab, classes).decoded_vocab]
    engines = compile_engines(INLINE, vocab, classes)
    plain, compressed = engines.plain(), engines.compressed()
    mask = compressed.next_vocab_bitmask()
    assert torch.equal(plain.next_vocab_bitmask(), mask)
    assert np.flatnonzero(unpack_bitmask(mask, vocab.vocab_size)).tolist() == [3]  # "inline"
    assert verify_lossless(INLINE, vocab, classes, walks=3, steps=4, seed=0).ok


# Grammars with tokens refused inside tokens allowed, and the words that make such pairs.
GRAMMARS__WORDS = [
    ('root ::= "a" [^\\n]+ "\\n"', [b"a\n", b"aa\n", b"aa"]),
    ('root ::= "inline" | "in" [a-c]', [b"in", b"ine", b"inf", b"inline", b"inb"]),
    ('root ::= "luluk" | "lu" [a-c]', [b"lu", b"luk", b"luluk", b"lum"]),
]
SHORT = sorted({"".join(p).encode() for n in range(1, 4) for p in itertools.product("abc\n", repeat=n)})


@pytest.mark.parametrize("grammar__words", GRAMMARS__WORDS)
def test_fenced_subvocabulary_decides_like_the_full_one(grammar__words):
    """Any subset of a vocabulary, with its fences, gets XGrammar's decisions of the full
    vocabulary for each of its tokens, at the start (the compile-time cache) and after a prefix
    (the run-time check); without the fences some subsets do not (the test has teeth)."""
    grammar, words = grammar__words
    rng = random.Random(31)
    unfenced_wrong = 0
    for _ in range(40):
        full = sorted(set(rng.sample(SHORT, 24)) | set(words))
        listed = rng.sample(full, 8)
        fenced = listed + run_fences(SortedRuns.of(full), listed)
        for prefix in ["", "a", "l", "lu", "in"]:
            try:
                want = _allowed(grammar, full, prefix) & set(listed)
            except AssertionError:
                continue  # the grammar does not take this prefix
            assert _allowed(grammar, fenced, prefix) & set(listed) == want, (full, listed, prefix)
            unfenced_wrong += _allowed(grammar, listed, prefix) & set(listed) != want
    assert unfenced_wrong > 0
