"""The XGrammar drop-in: one call sequence on XGrammar's own GrammarMatcher and on ours, every result compared."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xgrammar as xgr

from cfgzip_lab import xgrammar_compat as compat
from cfgzip_lab.bench import sample_docs
from cfgzip_lab.engine import compile_engines
from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
from cfgzip_lab.vocab_sources import load_vocab


@pytest.fixture(scope="module", params=["json", "c_like"])
def setup(request):
    vocab = load_vocab("smollm2")
    path = resolve_grammar(request.param)
    text = path.read_text(encoding="utf-8")
    compiled = compile_grammar(text)
    classing = build_classes(compiled, vocab)
    engines = compile_engines(text, vocab, classing.classes)
    doc = min(sample_docs(path), key=len)
    tokens = [int(t) for t in vocab.encode(doc)][:60]
    return {"vocab": vocab, "engines": engines, "compiled": compiled, "classing": classing, "tokens": tokens}


def engine_kinds(setup):
    yield "compressed", setup["engines"].compressed()
    yield "plain", setup["engines"].plain()
    try:
        from cfgzip_lab.native import build_native_engine
    except ImportError:
        return
    native = build_native_engine(
        setup["compiled"],
        setup["vocab"],
        setup["classing"].classes,
        classing=setup["classing"],
        xgrammar_engines=setup["engines"],
    )
    yield "native", native.matcher()


def compare_sequence(ours: compat.GrammarMatcher, theirs: xgr.GrammarMatcher, tokens, vocab_size, jump_forward):
    """The calls a serving engine makes, in its order, on both; every result must be equal."""
    mask_ours = compat.allocate_token_bitmask(2, vocab_size)
    mask_theirs = xgr.allocate_token_bitmask(2, vocab_size)
    assert mask_ours.shape == mask_theirs.shape == xgr.get_bitmask_shape(2, vocab_size)
    rng = np.random.default_rng(0)
    for step, token in enumerate(tokens):
        index = step % 2
        need_ours = ours.fill_next_token_bitmask(mask_ours, index)
        need_theirs = theirs.fill_next_token_bitmask(mask_theirs, index)
        assert need_ours == need_theirs, step
        assert torch.equal(mask_ours, mask_theirs), step  # whole tensors: tail bits included
        if jump_forward:
            assert ours.find_jump_forward_string() == theirs.find_jump_forward_string(), step
        refused = int(rng.integers(vocab_size))  # usually not allowed here: both must agree
        accepted = ours.accept_token(refused)
        assert accepted == theirs.accept_token(refused), (step, refused)
        if accepted:  # allowed after all: both undo it
            assert ours.is_terminated() == theirs.is_terminated()
            ours.rollback(1)
            theirs.rollback(1)
        assert ours.accept_token(token) is True and theirs.accept_token(token) is True, step
        if step % 7 == 3:  # rollback and redo, as speculative decoding does
            ours.rollback(1)
            theirs.rollback(1)
            assert ours.accept_token(token) and theirs.accept_token(token)
        assert ours.is_terminated() == theirs.is_terminated()
        assert ours.is_completed() == theirs.is_completed()
    logits = torch.randn(2, vocab_size)
    a, b = logits.clone(), logits.clone()
    compat.apply_token_bitmask_inplace(a, mask_ours, vocab_size=vocab_size)
    xgr.apply_token_bitmask_inplace(b, mask_theirs, vocab_size=vocab_size)
    assert torch.equal(a, b)
    ours.reset()
    theirs.reset()
    assert ours.fill_next_token_bitmask(mask_ours, 0) == theirs.fill_next_token_bitmask(mask_theirs, 0)
    assert torch.equal(mask_ours, mask_theirs)


def test_same_calls_same_results_as_xgrammar(setup):
    """XGrammar's matcher over the full vocabulary against ours over each engine kind."""
    vocab_size = setup["vocab"].vocab_size
    for kind, engine in engine_kinds(setup):
        theirs = xgr.GrammarMatcher(setup["engines"].plain_grammar)
        ours = compat.GrammarMatcher(engine)
        compare_sequence(ours, theirs, setup["tokens"], vocab_size, jump_forward=kind != "native")
        assert ours.stop_token_ids == theirs.stop_token_ids


def test_stop_token_terminates_both(setup):
    vocab = setup["vocab"]
    theirs = xgr.GrammarMatcher(setup["engines"].plain_grammar)
    ours = compat.GrammarMatcher(setup["engines"].compressed())
    for t in setup["tokens"]:
        assert ours.accept_token(t) and theirs.accept_token(t)
    stop = int(vocab.stop_ids[0])
    assert ours.accept_token(stop) == theirs.accept_token(stop)
    assert ours.is_terminated() == theirs.is_terminated()


def test_batch_fill_equals_xgrammar_batch_fill(setup):
    vocab_size = setup["vocab"].vocab_size
    tokens = setup["tokens"]
    ours = [compat.GrammarMatcher(setup["engines"].compressed()) for _ in range(3)]
    theirs = [xgr.GrammarMatcher(setup["engines"].plain_grammar) for _ in range(3)]
    for i in range(3):  # rows at different points of the document
        for t in tokens[: 5 * (i + 1)]:
            assert ours[i].accept_token(t) and theirs[i].accept_token(t)
    mask_ours = compat.allocate_token_bitmask(4, vocab_size)
    mask_theirs = xgr.allocate_token_bitmask(4, vocab_size)
    compat.BatchGrammarMatcher().batch_fill_next_token_bitmask(ours, mask_ours, [3, 0, 2])
    xgr.BatchGrammarMatcher().batch_fill_next_token_bitmask(theirs, mask_theirs, [3, 0, 2])
    assert torch.equal(mask_ours, mask_theirs)
    compat.BatchGrammarMatcher.batch_rollback(ours, [1, 2, 3])
    xgr.BatchGrammarMatcher.batch_rollback(theirs, [1, 2, 3])
    assert compat.BatchGrammarMatcher.batch_accept_token(
        ours, tokens[:3]
    ) == xgr.BatchGrammarMatcher.batch_accept_token(theirs, tokens[:3])


def test_bitmask_must_be_a_cpu_int32_tensor(setup):
    ours = compat.GrammarMatcher(setup["engines"].compressed())
    with pytest.raises(RuntimeError, match="int32 tensor on the CPU"):
        ours.fill_next_token_bitmask(torch.zeros(1, 10, dtype=torch.int64))
