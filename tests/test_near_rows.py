"""The compiled expansion's near rows (``csrc/expand.c``, ``expand_near``) against ``expand_row`` and a gather.

A new class set's row is made from the nearest of the last rows made (its row XOR the rows of the
classes the two sets do not share) where that is cheaper than expanding it: every row must still be
the gather's, bit for bit, through both paths, the ring's wrap and the lazily made table rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_tools import gathered_mask, llama3_or_skip

from cfgzip_lab.native.rows import kernel_available

needs_kernel = pytest.mark.skipif(not kernel_available(), reason="the compiled kernel is not built here")


def _as_int(bits: np.ndarray) -> int:
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")


def _drifting_sets(k: int, large: np.ndarray, rng, n: int = 40) -> list[int]:
    """Class sets as decoding meets them: each a few classes (large ones among them) from an earlier
    one, with a jump to a fresh random set now and then, and repeats."""
    bits = rng.random(k) < 0.45
    seen = [bits.copy()]
    for i in range(n):
        if i % 9 == 8:
            bits = rng.random(k) < rng.choice([0.05, 0.5, 0.95])
        else:
            bits = seen[int(rng.integers(max(0, len(seen) - 20), len(seen)))].copy()
            flip = rng.integers(0, k, size=int(rng.integers(0, 12)))
            bits[flip] ^= True
            if large.size and rng.random() < 0.5:
                bits[rng.choice(large)] ^= True
        seen.append(bits.copy())
    return [_as_int(b) for b in seen]


def _shapes(vocab, rng):
    ids = np.arange(vocab.vocab_size)
    yield np.minimum(ids // 20_000, 6)  # 7 huge classes
    yield np.where(ids < 3_000, ids, 3_000 + ids % 97)  # singletons and mid-sized classes
    yield rng.integers(0, 300, size=vocab.vocab_size) ** 2 % 1201  # skewed sizes, a few empty classes


@needs_kernel
@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_near_rows_equal_the_gather_and_expand_row(lazy):
    """Rows made near and from scratch, over drifting class sets on three partitions of Llama-3's
    vocabulary: each equals the gather and expand_row's row; both paths are taken."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import CompiledExpansion, compiled_tables

    rng = np.random.default_rng(5)
    vocab = llama3_or_skip()
    for class_of in _shapes(vocab, rng):
        class_of = np.ascontiguousarray(class_of, dtype=np.int32)
        k = int(class_of.max()) + 1
        words = -(-class_of.size // 32)
        eager = CompiledExpansion(_kernel, *compiled_tables(_kernel, class_of, k, most=64, min_tokens=256,
                                                            vocab_words=words))  # fmt: skip
        if lazy:  # the largest class deferred: its row made from class_of when a set first holds it
            defer = np.zeros(k, dtype=bool)
            defer[eager.members[0]] = True
            lm, lt, lp, built = compiled_tables(
                _kernel, class_of, k, most=64, min_tokens=256, vocab_words=words, lazy=True, defer=defer
            )
            expansion = CompiledExpansion(_kernel, lm, lt, lp, built, class_of)
        else:
            expansion = eager
        for ring in (1, 3, 16):
            near = expansion.nearest(ring)
            sets = _drifting_sets(k, np.unique(eager.members), rng)
            nbytes = -(-k // 8)
            for s in sets:
                got = near.expand(s)
                assert np.array_equal(got, gathered_mask(class_of, k, s))
                assert np.array_equal(got, eager.expand(s.to_bytes(nbytes, "little")))
            if ring == 1:
                assert near.near == 0  # the only entry is the one written now
            else:
                assert 0 < near.near < len(sets)


def _engines(name: str, vocab):
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar

    path = resolve_grammar(name)
    compiled = compile_grammar(path.read_text(encoding="utf-8"))
    result = build_classes(compiled, vocab)
    engines = compile_engines(compiled.text, vocab, result.classes)
    native = build_native_engine(compiled, vocab, result.classes, classing=result, xgrammar_engines=engines)
    return path, engines, native


@needs_kernel
@pytest.mark.parametrize("name", ["c_like", "bython"])
def test_filled_masks_equal_xgrammar_and_the_python_path(name):
    """On a bundled code grammar's sample documents (Llama-3): the compiled fill (csrc/fill.c) writes
    XGrammar's mask at every step, as the Python path (class_mask, then the row cache) does; its state
    and set memos are hit and its rows made near; a batch fills each row the same way."""
    import torch

    from cfgzip_lab.bench import sample_docs
    from cfgzip_lab.vocab_sources import load_vocab  # noqa: F401 - llama3_or_skip skips without it

    vocab = llama3_or_skip()
    path, engines, native = _engines(name, vocab)
    m, plain = native.matcher(), engines.plain()
    assert m._filler is not None and native.filler is m._filler
    bitmask = m.allocate_bitmask(2)
    ids = [t for doc in sample_docs(path)[:2] for t in vocab.encode(doc)[:150]]
    for i, t in enumerate(ids):
        want = m.next_vocab_bitmask().reshape(-1)  # the Python path: every step
        if i % 5 == 0:  # XGrammar's own fill takes ~0.1 s a step on these grammars: every fifth
            assert torch.equal(plain.next_vocab_bitmask().reshape(-1), want)
        for row in (1, 0):  # the second row of a bitmask, then the first (one view kept per tensor)
            bitmask.fill_(-7)
            m.fill_next_token_bitmask(bitmask, row)
            assert torch.equal(bitmask[row], want) and bool((bitmask[1 - row] == -7).all())
        if not (m.accept_token(t) and plain.accept_token(t)):  # a new document starts
            m.reset()
            plain.reset()
    stats = native.stats()
    assert stats["fill_state_hits"] > 0 and stats["fill_rows_made"] > 0 and stats["fill_drops"] == 0
    assert native.rows._near.near > 0
    batch = native.batch(2)
    out = torch.zeros(2, m.bitmask_size, dtype=torch.int32)
    for t in ids[:40]:
        batch.matchers[1].accept_token(t)
    batch.fill_next_token_bitmask(out)
    assert torch.equal(out[0], batch.matchers[0].next_vocab_bitmask().reshape(-1))
    assert torch.equal(out[1], batch.matchers[1].next_vocab_bitmask().reshape(-1))


@needs_kernel
def test_filler_drops_its_tables_at_the_bound_and_stays_exact():
    """A filler bounded to 3 rows drops its tables over and over on a decode and writes the Python
    path's rows all the same; the Python path itself is what an engine with use_filler False serves."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.bench import sample_docs

    vocab = llama3_or_skip()
    path, _, native = _engines("c_like", vocab)
    w, rows = native.walker, native.rows
    filler = _kernel.filler_new(w._trie, w._native, rows._near._capsule, w.num_classes, rows.vocab_words,
                                w.stop_class, 3)  # fmt: skip
    m = native.matcher()
    m._filler = filler
    bitmask = m.allocate_bitmask(1)
    for t in vocab.encode(sample_docs(path)[0])[:120]:
        m.fill_next_token_bitmask(bitmask)
        assert np.array_equal(bitmask.numpy()[0], m.vocab_row())
        assert m.accept_token(t)
    assert _kernel.filler_stats(filler)[3] > 10
    native_off = type(native)(native.compiled, native.vocab, native.classes, native.index)
    native_off.use_filler = False
    assert native_off.matcher()._filler is None and native_off.filler is None
    with pytest.raises(ValueError, match="2-D int32"):
        _kernel.fill_state(filler, w.initial, np.zeros((1, rows.vocab_words - 1), np.int32), 0)
    with pytest.raises(ValueError, match="2-D int32"):
        _kernel.fill_state(filler, w.initial, np.zeros((1, rows.vocab_words), np.int32), 1)
    with pytest.raises(IndexError):
        _kernel.fill_state(filler, 10**9, np.zeros((1, rows.vocab_words), np.int32), 0)
    with pytest.raises(ValueError, match="not a trie"):
        _kernel.filler_new(rows._near._capsule, w._native, w._trie, w.num_classes, rows.vocab_words, -1, 3)


@needs_kernel
def test_expand_near_refuses_what_does_not_fit():
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.kernels.union_tables import CompiledExpansion, compiled_tables

    class_of = np.repeat(np.arange(3, dtype=np.int32), [40, 20, 4])
    expansion = CompiledExpansion(_kernel, *compiled_tables(_kernel, class_of, 3, most=1, min_tokens=1, vocab_words=2))
    near = expansion.nearest(2)
    with pytest.raises(ValueError, match="wrong size"):
        _kernel.expand_near(near._capsule, b"\x01", np.zeros(2, np.int32))  # a set of 8 bytes is needed
    with pytest.raises(ValueError, match="wrong size"):
        _kernel.expand_near(near._capsule, bytes(8), np.zeros(3, np.int32))
    p = expansion.pairs
    args = [expansion.members, expansion.tables, p.indptr, p.words, p.bits, p.all_bits, None, None]
    large = bytes([1]) + bytes(7)
    for bad in ([-1, -1, -1], [3, -1, -1], [16, -1, -1], [1, 1, -1]):  # missing, a union, past the tables, class 1
        with pytest.raises(ValueError, match="large classes"):
            _kernel.near_rows_new(*args, large, np.array(bad, np.int32), 2, 2)
    with pytest.raises(ValueError, match="large classes"):  # the bit of class 0 absent
        _kernel.near_rows_new(*args, bytes(8), np.array([1, -1, -1], np.int32), 2, 2)
    assert np.array_equal(near.expand(0b101), gathered_mask(class_of, 3, 0b101))


@needs_kernel
def test_filler_tables_grow_from_small_and_stay_exact():
    """A filler's state and set tables start small (csrc/fill.c ``FILL_STATES0``, 64 rows' room) and grow
    as states and rows come; on a decode past both first sizes, replayed twice (the second pass finds the
    states again after the tables were rebuilt), every mask is the Python path's row."""
    from cfgzip_lab._binding import kernel as _kernel
    from cfgzip_lab.bench import sample_docs

    vocab = llama3_or_skip()
    path, _, native = _engines("c_like", vocab)
    w, rows = native.walker, native.rows
    filler = _kernel.filler_new(w._trie, w._native, rows._near._capsule, w.num_classes, rows.vocab_words,
                                w.stop_class, 4096)  # fmt: skip
    m = native.matcher()
    m._filler = filler
    bitmask = m.allocate_bitmask(1)
    ids = [t for doc in sample_docs(path)[:3] for t in vocab.encode(doc)[:400]]
    for _ in range(2):
        m.reset()
        for t in ids:
            m.fill_next_token_bitmask(bitmask)
            assert np.array_equal(bitmask.numpy()[0], m.vocab_row())
            if not m.accept_token(t):
                m.reset()
    state_hits, set_hits, made, drops = _kernel.filler_stats(filler)
    assert made > 64 and made + set_hits > 256 and state_hits >= len(ids) and drops == 0
