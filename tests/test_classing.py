"""Displacement classing: soundness against XGrammar's plain matcher, determinism, budgets.

The soundness check needs no engine wrapper: along random valid token paths of
XGrammar's own matcher over the full vocabulary, every class must be wholly
allowed or wholly disallowed at every state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xgrammar
from paths import BUILTIN_JSON, BUNDLED, BUNDLED_DIR

from cfgzip_lab.classes.classing import BLOCKED, NORMAL, STOP, compute_classes
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes
from cfgzip_lab.vocab_sources import load_vocab


@pytest.fixture(scope="module")
def llama3():
    return load_vocab("llama3")


def allowed_ids(matcher: xgrammar.GrammarMatcher, vocab_size: int) -> np.ndarray:
    bitmask = xgrammar.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:vocab_size]
    return bits.astype(bool)


def assert_classes_uniform(allowed: np.ndarray, class_of: np.ndarray, where: str) -> None:
    sizes = np.bincount(class_of)
    hits = np.bincount(class_of, weights=allowed.astype(np.int64), minlength=sizes.size)
    split = np.flatnonzero((hits > 0) & (hits < sizes))
    assert split.size == 0, f"{where}: classes {split[:5].tolist()} are partly allowed"


@pytest.mark.slow
@pytest.mark.parametrize("path", BUNDLED + [BUILTIN_JSON], ids=lambda p: p.stem)
def test_classes_are_uniform_along_xgrammar_walks(path: Path, llama3) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not checked out here")
    text = path.read_text(encoding="utf-8")
    classes = build_classes(compile_grammar(text), llama3).classes
    compiler = xgrammar.GrammarCompiler(llama3.to_xgrammar(), cache_enabled=False)
    compiled = compiler.compile_grammar(text)
    rng = np.random.default_rng(0)
    lengths = np.array([len(b) for b in llama3.token_bytes])
    for walk in range(3):
        matcher = xgrammar.GrammarMatcher(compiled)
        for step in range(10):
            allowed = allowed_ids(matcher, llama3.vocab_size)
            assert_classes_uniform(allowed, classes.class_of, f"{path.stem} walk {walk} step {step}")
            # BLOCKED is never allowed; STOP exactly when the grammar can end.
            assert not allowed[classes.class_of == classes.blocked_class()].any()
            choices = np.flatnonzero(allowed & (classes.class_kind[classes.class_of] == NORMAL))
            if choices.size == 0:
                break
            weights = lengths[choices].astype(float) ** 2
            token = int(rng.choice(choices, p=weights / weights.sum()))
            assert matcher.accept_token(token)


def test_json_class_count_and_kinds(llama3) -> None:
    if not BUILTIN_JSON.exists():
        pytest.skip(f"{BUILTIN_JSON} is not checked out here")
    classes = build_classes(compile_grammar(BUILTIN_JSON.read_text()), llama3).classes
    assert classes.num_classes <= 360
    assert classes.metadata["fallback_singletons"] == 0
    assert classes.class_kind[0] == BLOCKED and classes.class_kind[1] == STOP
    # Stop tokens share one class; special ids are blocked; representatives are members.
    assert len({int(classes.class_of[t]) for t in llama3.stop_ids}) == 1
    assert np.array_equal(classes.class_of[classes.representatives], np.arange(classes.num_classes))
    for k in range(2, classes.num_classes):
        members = classes.members(k)
        rep = int(classes.representatives[k])
        shortest = min(len(llama3.token_bytes[t]) for t in members)
        assert len(llama3.token_bytes[rep]) == shortest
        assert rep == min(t for t in members if len(llama3.token_bytes[t]) == shortest)


def test_classing_is_deterministic(llama3) -> None:
    text = (BUNDLED_DIR / "json.ebnf").read_text()
    a = build_classes(compile_grammar(text), llama3).classes
    b = build_classes(compile_grammar(text), llama3).classes
    assert np.array_equal(a.class_of, b.class_of) and np.array_equal(a.representatives, b.representatives)


def toy_vocab():
    tokens = [b"a", b"b", b"ab", b"(", b")", b"((", b"))", b"x", b"", b"a" * 40]
    return vocab_from_bytes(tokens, stop_ids=[8], name="toy")


def test_toy_partition() -> None:
    vocab = toy_vocab()
    compiled = compile_grammar('root ::= "(" root ")" | [ab]+\n')
    classes = build_classes(compiled, vocab).classes
    c = classes.class_of
    assert c[0] == c[1]  # a and b cannot be told apart
    assert c[3] != c[5] and c[4] != c[6]  # one vs two parentheses are different
    assert classes.class_kind[c[7]] == BLOCKED  # "x" is in no sentence: dead
    assert classes.metadata["dead_tokens"] == 1
    assert classes.class_kind[c[8]] == STOP


def test_budget_overflow_makes_counted_singletons() -> None:
    vocab = toy_vocab()
    compiled = compile_grammar('root ::= "(" root ")" | [ab]+\n')
    result = compute_classes(compiled.gnf, vocab.token_bytes, vocab.kinds, budget=1)
    classes = result.classes
    assert classes.metadata["fallback_singletons"] > 0
    sizes = classes.class_sizes()
    normal = [k for k in range(classes.num_classes) if classes.class_kind[k] == NORMAL]
    assert all(sizes[k] == 1 for k in normal)  # every text token that overflowed stands alone


def test_long_runs_of_identical_bytes_stay_exact(llama3) -> None:
    """The 128-space token and friends: no fallback, and equal runs share classes."""
    text = (BUNDLED_DIR / "xml.ebnf").read_text()
    classes = build_classes(compile_grammar(text), llama3).classes
    assert classes.metadata["fallback_singletons"] == 0
    spaces = [t for t, b in enumerate(llama3.token_bytes) if b and set(b) == {0x20}]
    assert len(spaces) > 10 and max(len(llama3.token_bytes[t]) for t in spaces) >= 64
    assert len({int(classes.class_of[t]) for t in spaces if len(llama3.token_bytes[t]) >= 2}) <= 3


def test_per_occurrence_lifting_and_context_merging_give_fewer_classes(llama3) -> None:
    """Sharing one lifted nonterminal per byte set chains keyword letters through stack
    adjacency (``i g n i t e d``) and splits classes; the default keeps them apart."""
    from cfgzip_lab.grammar.gnf import to_gnf

    compiled = compile_grammar((BUNDLED_DIR / "c_like.ebnf").read_text())
    shared = compute_classes(to_gnf(compiled.cfg, lift_per_occurrence=False), llama3.token_bytes, llama3.kinds)
    default = build_classes(compiled, llama3)
    assert default.classes.num_classes * 1.5 < shared.classes.num_classes
    ids = {b: t for t, b in enumerate(llama3.token_bytes)}
    ignited, excited = ids[b" ignited"], ids[b" excited"]
    assert default.classes.class_of[ignited] == default.classes.class_of[excited]
    assert shared.classes.class_of[ignited] != shared.classes.class_of[excited]


def test_two_workers_give_the_one_process_partition(llama3) -> None:
    """Forked workers re-intern their DAG nodes in the parent: same sets, same ids. (The Python
    path's workers; the compiled path, the default where it is built, runs in one process whatever
    ``workers`` says, and is the one-process partition here.)"""
    gnf = compile_grammar((BUNDLED_DIR / "xml.ebnf").read_text()).gnf
    one = compute_classes(gnf, llama3.token_bytes, llama3.kinds, workers=1).classes
    gnf = compile_grammar((BUNDLED_DIR / "xml.ebnf").read_text()).gnf
    two = compute_classes(gnf, llama3.token_bytes, llama3.kinds, workers=2, compiled=False).classes
    assert two.metadata["workers"] == 2
    assert np.array_equal(one.class_of, two.class_of)
    assert np.array_equal(one.representatives, two.representatives)
